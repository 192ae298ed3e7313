package shard

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/schemascope"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/schema"
	"github.com/hopperq/hopper/shard/internal/sharddb"
)

// DefaultPrefix begins the shards' schema names when Options.Prefix is
// empty: hopper_s00, hopper_s01, …
const DefaultPrefix = "hopper_s"

// MaxCount is the largest shard count Create accepts. Citus balances whole
// schemas, so a few times the nodes one expects to grow to is enough; each
// shard costs a migrated schema and a turn in every fan-out read.
const MaxCount = 1024

// Options shape Create.
type Options struct {
	// Count is the number of shards, fixed for the life of the deployment
	// (1 to MaxCount). Job ids name their shard as id mod Count.
	Count int
	// Prefix begins each shard's schema name, followed by its position,
	// zero-padded to at least two digits (DefaultPrefix when empty).
	Prefix string
	// Logf receives one line per step of the set-up (nil: none).
	Logf func(format string, args ...any)
}

// Set is a sharded Hopper on a Citus coordinator: its shards, each a
// Hopper schema in a distributed schema, in position order. It is what a
// sharded Client needs: it places enqueues (Enqueue, EnqueueMany,
// EnqueueBatch), routes operations by id to the shard the id names, and
// reads lists and stats across shards. Create or Open makes one; it is
// safe for concurrent use.
type Set struct {
	pool    *pgxpool.Pool
	names   []string
	clients []*hopper.Client  // clients[k] is scoped to names[k]
	scopes  []*schemascope.DB // scopes[k] runs statements in names[k]
	next    atomic.Uint64     // the round-robin placement's counter
}

// Names are the shards' schema names, in position order: Names()[id %
// Count()] holds the job of that id.
func (s *Set) Names() []string { return append([]string(nil), s.names...) }

// Count is the number of shards.
func (s *Set) Count() int { return len(s.names) }

// ShardOfID is the schema of the shard holding the job of that id ("" for
// an id below 1, which no job has).
func (s *Set) ShardOfID(id int64) string {
	if id < 1 {
		return ""
	}
	return s.names[id%int64(len(s.names))]
}

// ShardOfKey is the schema of the shard a routing key places a job in
// (Position of the key).
func (s *Set) ShardOfKey(key string) string { return s.names[Position(key, len(s.names))] }

// Client is a hopper.Client scoped to one shard (a name of Names), for
// the operations the Set does not route or fan out itself. It panics on
// a name that is not a shard of the set.
func (s *Set) Client(shard string) *hopper.Client {
	for k, name := range s.names {
		if name == shard {
			return s.clients[k]
		}
	}
	panic(fmt.Sprintf("hopper: shard %q is not in the set", shard))
}

// Name is the schema name of the shard at position k of count shards.
func Name(prefix string, k, count int) string {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	width := max(2, len(fmt.Sprint(count-1)))
	return fmt.Sprintf("%s%0*d", prefix, width, k)
}

func (o Options) check() error {
	if o.Count < 1 || o.Count > MaxCount {
		return fmt.Errorf("%w: count %d is outside 1 to %d", ErrInvalidOptions, o.Count, MaxCount)
	}
	if err := schemascope.CheckName(Name(o.Prefix, o.Count-1, o.Count)); err != nil {
		return fmt.Errorf("%w: prefix %q: %v", ErrInvalidOptions, o.Prefix, err)
	}
	return nil
}

// Create sets up a sharded Hopper on the Citus coordinator pool connects
// to, or brings one set up before up to date:
//
//   - the directory (schema hopper_directory, a plain schema of the
//     coordinator) and its SQL helpers (hopper_shard_position,
//     hopper_shard_for: the routing key's shard, as Position computes it);
//   - each shard's schema, Name(prefix, k, count), created as a
//     distributed schema (schema-based sharding) unless it exists;
//   - each shard migrated by schema.Up;
//   - each shard's id sequence stepping by the count from the shard's
//     position, so that id mod count names the shard; the shard made
//     silent (its hopper_silent returns true: none of its functions
//     sends NOTIFY, migration 34) and its insert trigger disabled (the
//     Set and the sharded worker wake the workers on the coordinator);
//   - each shard recorded in the directory.
//
// Run again on a set-up database with the same count and prefix, it
// migrates each shard and applies the settings again (a new release's
// migrations, say); with another, it fails with ErrCountMismatch and
// changes nothing. Without the citus extension it fails with ErrNotCitus.
func Create(ctx context.Context, pool *pgxpool.Pool, opts Options) (*Set, error) {
	if opts.Prefix == "" {
		opts.Prefix = DefaultPrefix
	}
	if err := opts.check(); err != nil {
		return nil, fmt.Errorf("shards create: %w", err)
	}
	logf := opts.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	version, err := db.New(pool).CitusVersion(ctx)
	if err != nil {
		return nil, fmt.Errorf("shards create: is the citus extension installed: %w", err)
	}
	if version == "" {
		return nil, fmt.Errorf("shards create: %w: the database has no citus extension: run CREATE EXTENSION citus on the coordinator and add the worker nodes (citus_add_node), or use one Hopper schema (hopper migrate up)", ErrNotCitus)
	}
	names := make([]string, opts.Count)
	for k := range names {
		names[k] = Name(opts.Prefix, k, opts.Count)
	}
	if err := createDirectory(ctx, pool, names); err != nil {
		return nil, fmt.Errorf("shards create: %w", err)
	}
	logf("shards: directory ready (Citus %s), %d shards %s to %s", version, opts.Count, names[0], names[len(names)-1])
	q := sharddb.New(pool)
	for k, name := range names {
		existed, err := q.CreateShardSchema(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("shards create: schema %s: %w", name, err)
		}
		distributed, err := q.ShardIsDistributed(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("shards create: schema %s: %w", name, err)
		}
		if !distributed {
			return nil, fmt.Errorf("shards create: %w: %s exists as a plain schema; drop it, or distribute it with SELECT citus_schema_distribute('%s')", ErrNotDistributed, name, name)
		}
		if err := schema.Up(ctx, pool, schema.Name(name), schema.Logf(logf)); err != nil {
			return nil, fmt.Errorf("shards create: migrate %s: %w", name, err)
		}
		err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			q := sharddb.New(tx)
			if err := q.PrepareShard(ctx, sharddb.PrepareShardParams{Name: name, Position: int32(k), ShardCount: int32(opts.Count)}); err != nil {
				return err
			}
			return q.RecordShard(ctx, sharddb.RecordShardParams{Position: int32(k), Name: name, ShardCount: int32(opts.Count)})
		})
		if err != nil {
			return nil, fmt.Errorf("shards create: prepare %s: %w", name, err)
		}
		logf("shards: %s ready (existed before: %v)", name, existed)
	}
	return Open(ctx, pool)
}

// createDirectory makes the directory and its functions (idempotent
// statements), in one transaction that first checks the count recorded
// against the one asked for.
func createDirectory(ctx context.Context, pool *pgxpool.Pool, names []string) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		q := sharddb.New(tx)
		steps := []func(context.Context) error{
			q.DirectorySettings, q.CreateDirectorySchema, q.CreateDirectoryTable,
			q.CreateShardOfFunction, q.CreateShardForFunction, q.CreateShardSchemaFunction,
			q.CreatePrepareShardFunction, q.CreateShardDistributedFunction, q.CreateShardNodeFunction, q.CreateShardVersionFunction,
		}
		for _, step := range steps {
			if err := step(ctx); err != nil {
				return fmt.Errorf("directory: %w", err)
			}
		}
		recorded, err := q.ListShards(ctx)
		if err != nil {
			return fmt.Errorf("directory: %w", err)
		}
		for _, r := range recorded {
			if int(r.ShardCount) != len(names) || int(r.Position) >= len(names) || r.Name != names[r.Position] {
				return fmt.Errorf("%w: the directory records %d shards (%s at position %d), asked for %d (%s)",
					ErrCountMismatch, r.ShardCount, r.Name, r.Position, len(names), names[min(int(r.Position), len(names)-1)])
			}
		}
		return nil
	})
}

// Open reads the directory of the sharded Hopper on the coordinator pool
// connects to. It fails with ErrNoDirectory when Create has not run
// there, and with ErrNotCitus without the citus extension.
func Open(ctx context.Context, pool *pgxpool.Pool) (*Set, error) {
	q := sharddb.New(pool)
	exists, err := q.DirectoryExists(ctx)
	if err != nil {
		return nil, fmt.Errorf("shards: %w", err)
	}
	if !exists {
		version, err := db.New(pool).CitusVersion(ctx)
		if err == nil && version == "" {
			return nil, fmt.Errorf("shards: %w: the database has no citus extension", ErrNotCitus)
		}
		return nil, fmt.Errorf("shards: %w: run shard.Create (hopper shards create --count N) on the coordinator first", ErrNoDirectory)
	}
	rows, err := q.ListShards(ctx)
	if err != nil {
		return nil, fmt.Errorf("shards: %w", err)
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("shards: %w: the directory lists no shard (an interrupted set-up: run it again)", ErrNoDirectory)
	}
	count := int(rows[0].ShardCount)
	if len(rows) != count {
		return nil, fmt.Errorf("shards: %w: the directory lists %d of its %d shards (an interrupted set-up: run it again)", ErrNoDirectory, len(rows), count)
	}
	s := &Set{pool: pool, names: make([]string, count), clients: make([]*hopper.Client, count), scopes: make([]*schemascope.DB, count)}
	for k, r := range rows {
		if int(r.Position) != k || int(r.ShardCount) != count {
			return nil, fmt.Errorf("shards: the directory is inconsistent at position %d (%s, count %d)", r.Position, r.Name, r.ShardCount)
		}
		s.names[k] = r.Name
		scoped, err := jobs.InSchema(pool, r.Name)
		if err != nil {
			return nil, fmt.Errorf("shards: %w", err)
		}
		s.scopes[k] = scoped.(*schemascope.DB)
		s.clients[k] = hopper.NewClient(scoped)
	}
	return s, nil
}

// fanOutWidth bounds how many shards a fan-out reads at once, so that a
// read of many shards does not take every connection of the pool.
const fanOutWidth = 8

// fanOut runs fn on every shard, up to fanOutWidth at once (each on a
// pool connection of its own), and joins their errors.
func (s *Set) fanOut(ctx context.Context, fn func(ctx context.Context, k int, c *hopper.Client) error) error {
	errs := make([]error, len(s.names))
	var wg sync.WaitGroup
	sem := make(chan struct{}, fanOutWidth)
	for k := range s.names {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem }()
			defer wg.Done()
			if err := fn(ctx, k, s.clients[k]); err != nil {
				errs[k] = fmt.Errorf("shard %s: %w", s.names[k], err)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
