package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/internal/migrated"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/shard"
)

// The job commands take --sharded to work on a sharded Hopper (package
// shard) through its Citus coordinator, rather than on one Hopper schema:
// the same actions, filters and output, with an operation by id sent to
// the shard the id names (id mod the shard count) and a listing or stats
// read across every shard. It is a flag of the commands an operator
// already knows, like --schema (which it replaces: the directory names the
// schemas), rather than a second set of commands under hopper shards.

// shardedUsage documents --sharded.
const shardedUsage = "work on the sharded Hopper of this Citus coordinator (hopper shards create): an id goes to the shard it names, a listing reads every shard"

// jobsAPI is what the job commands use: a hopper.Client on one schema, or
// shardedJobs on a sharded Hopper.
type jobsAPI interface {
	ListJobs(ctx context.Context, p hopper.ListParams) (hopper.JobPage, error)
	GetJob(ctx context.Context, id int64) (jobs.Row, error)
	ListJobSteps(ctx context.Context, id int64) ([]hopper.JobStep, error)
	CancelJobs(ctx context.Context, ids ...int64) ([]hopper.CancelResult, error)
	WakeJob(ctx context.Context, id int64) (hopper.StepKind, error)
	UpdateJob(ctx context.Context, id int64, u hopper.JobUpdate) (jobs.Row, error)
	DeleteJob(ctx context.Context, id int64) (jobs.Row, error)
	GetStats(ctx context.Context) (hopper.Stats, error)
	RetryDeadJobs(ctx context.Context, f hopper.DeadFilter) (hopper.RetryResult, error)
	PurgeDeadJobs(ctx context.Context, f hopper.DeadFilter) (int64, error)
}

var (
	_ jobsAPI = (*hopper.Client)(nil)
	_ jobsAPI = shardedJobs{}
)

// shardedJobs is jobsAPI on a shard.Set: what the Set routes or fans out
// itself, and the rest by id on the Client of the shard the id names.
type shardedJobs struct{ *shard.Set }

// UpdateJob is hopper.Client.UpdateJob on the shard the id names.
func (s shardedJobs) UpdateJob(ctx context.Context, id int64, u hopper.JobUpdate) (jobs.Row, error) {
	if id < 1 {
		return jobs.Row{}, fmt.Errorf("update job %d: %w", id, hopper.ErrNotFound)
	}
	return s.Client(s.ShardOfID(id)).UpdateJob(ctx, id, u)
}

// eachShard runs fn with the Client of every shard the filter reaches,
// in position order, and with the filter for that shard: its ids only
// (a shard none of the ids names is skipped), or the whole filter.
func (s shardedJobs) eachShard(f hopper.DeadFilter, fn func(name string, c *hopper.Client, f hopper.DeadFilter) error) error {
	for _, name := range s.Names() {
		fk := f
		if len(f.IDs) > 0 {
			fk.IDs = nil
			for _, id := range f.IDs {
				if s.ShardOfID(id) == name {
					fk.IDs = append(fk.IDs, id)
				}
			}
			if len(fk.IDs) == 0 {
				continue
			}
		}
		if err := fn(name, s.Client(name), fk); err != nil {
			return fmt.Errorf("shard %s: %w", name, err)
		}
	}
	return nil
}

// RetryDeadJobs is hopper.Client.RetryDeadJobs on every shard the filter
// reaches, one after another; on an error, the shards before it stay
// retried (the result says which jobs).
func (s shardedJobs) RetryDeadJobs(ctx context.Context, f hopper.DeadFilter) (hopper.RetryResult, error) {
	out := hopper.RetryResult{Retried: []int64{}, Kept: []int64{}}
	err := s.eachShard(f, func(_ string, c *hopper.Client, f hopper.DeadFilter) error {
		res, err := c.RetryDeadJobs(ctx, f)
		out.Retried = append(out.Retried, res.Retried...)
		out.Kept = append(out.Kept, res.Kept...)
		return err
	})
	slices.Sort(out.Retried)
	slices.Sort(out.Kept)
	return out, err
}

// PurgeDeadJobs is hopper.Client.PurgeDeadJobs on every shard the filter
// reaches, one after another.
func (s shardedJobs) PurgeDeadJobs(ctx context.Context, f hopper.DeadFilter) (int64, error) {
	var n int64
	err := s.eachShard(f, func(_ string, c *hopper.Client, f hopper.DeadFilter) error {
		purged, err := c.PurgeDeadJobs(ctx, f)
		n += purged
		return err
	})
	return n, err
}

// shardOf is the shard of a job id, for messages: "" on one schema.
func shardOf(api jobsAPI, id int64) string {
	if s, ok := api.(shardedJobs); ok {
		return s.ShardOfID(id)
	}
	return ""
}

// connectSet opens the sharded Hopper of the coordinator the connection
// string names, and checks that every shard is migrated to the version
// this build needs.
func (e *env) connectSet(maxConns int32) (*shard.Set, *pgxpool.Pool, error) {
	if e.schema != "" {
		return nil, nil, fmt.Errorf("%w: --sharded takes no --schema: the shard directory names the shards' schemas", errUsage)
	}
	pool, err := e.connectSized(maxConns)
	if err != nil {
		return nil, nil, err
	}
	set, err := shard.Open(e.ctx, pool)
	switch {
	case errors.Is(err, shard.ErrNotCitus):
		err = fmt.Errorf("--sharded: %w (it works on a sharded Hopper on a Citus coordinator; on one Hopper schema, drop --sharded)", err)
	case errors.Is(err, shard.ErrNoDirectory):
		err = fmt.Errorf("--sharded: %w", err)
	}
	if err == nil {
		for _, name := range set.Names() {
			run := "hopper shards create --count " + fmt.Sprint(set.Count()) + " (with the same --database-url: it migrates every shard)"
			if err = migrated.Check(e.ctx, pool, name, run); err != nil {
				err = fmt.Errorf("shard %s: %w", name, err)
				break
			}
		}
	}
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return set, pool, nil
}

// connectJobs is connectClient, or with --sharded the sharded Hopper's
// jobsAPI.
func (e *env) connectJobs() (jobsAPI, func(), error) {
	if !e.sharded {
		return e.connectClient()
	}
	set, pool, err := e.connectSet(commandMaxConns)
	if err != nil {
		return nil, nil, err
	}
	return shardedJobs{set}, pool.Close, nil
}

// declareSharded adds --sharded to fs.
func declareSharded(fs *flag.FlagSet, p *bool) { fs.BoolVar(p, "sharded", false, shardedUsage) }

// shardedStats is hopper stats' reading of a sharded Hopper: the stats
// added up over the shards, and per queue the fewest live workers any
// shard has (0: some shard's jobs of the queue wait for a worker).
func shardedStats(ctx context.Context, set *shard.Set) (hopper.Stats, map[string]int, error) {
	stats, err := set.GetStats(ctx)
	if err != nil {
		return hopper.Stats{}, nil, err
	}
	workers := map[string]int{}
	for _, r := range stats.Rows {
		workers[r.Queue] = -1 // none read yet
	}
	for _, name := range set.Names() {
		queues, err := set.Client(name).ListQueues(ctx)
		if err != nil {
			return hopper.Stats{}, nil, fmt.Errorf("shard %s: %w", name, err)
		}
		here := map[string]int{}
		for _, q := range queues {
			here[q.Name] = q.Workers
		}
		for q, w := range workers {
			if w < 0 || here[q] < w {
				workers[q] = here[q]
			}
		}
	}
	return stats, workers, nil
}
