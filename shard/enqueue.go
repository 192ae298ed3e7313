package shard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/shard/internal/sharddb"
)

// Entry is one job of a sharded EnqueueBatch: the job (Kind.Entry), and a
// routing key that places it when it has no sequence key, unique key nor
// concurrency key ("" for none: the next shard in turn).
type Entry struct {
	Job        jobs.Entry
	RoutingKey string
}

// Item is one job of a sharded EnqueueMany: its payload, options of its
// own that override the call's, and its routing key (see Entry).
type Item[T any] struct {
	Payload    T
	Options    []jobs.EnqueueOption
	RoutingKey string
}

// Items wraps payloads that need no options nor routing key of their
// own: each goes to the next shard in turn.
func Items[T any](payloads ...T) []Item[T] {
	items := make([]Item[T], len(payloads))
	for i, p := range payloads {
		items[i].Payload = p
	}
	return items
}

// Enqueue inserts one job of kind into the shard its placement names: its
// sequence key's (jobs.Sequence, SequenceBy or jobs.MetaSequence: a
// sequence lives whole in one shard), else its unique key's (a key
// deduplicates within its shard), else its concurrency key's, else the
// next shard in turn
// (EnqueueRouted places by a key of the caller's instead). dbtx is the
// coordinator: a pool, a connection or a transaction. The insert and the
// wake-up of the shard's workers (a pg_notify on the coordinator) run in
// one transaction: the caller's, or one of Enqueue's own, so the wake-up
// is sent at commit and never after a rollback. The result is
// jobs.Kind.Enqueue's; the id names the shard (Set.ShardOfID).
func Enqueue[T any](ctx context.Context, s *Set, dbtx jobs.DBTX, kind *jobs.Kind[T], payload T, opts ...jobs.EnqueueOption) (jobs.Result, error) {
	return EnqueueRouted(ctx, s, dbtx, "", kind, payload, opts...)
}

// EnqueueRouted is Enqueue with a routing key, which places a job that
// has no sequence key, unique key nor concurrency key: jobs of one routing key
// (a tenant, an account) share a shard, so a transaction that enqueues
// them touches one node.
func EnqueueRouted[T any](ctx context.Context, s *Set, dbtx jobs.DBTX, routingKey string, kind *jobs.Kind[T], payload T, opts ...jobs.EnqueueOption) (jobs.Result, error) {
	e := kind.Entry(payload, opts...)
	if err := e.Err(); err != nil {
		return jobs.Result{}, fmt.Errorf("enqueue %s: %w", kind.Name(), err)
	}
	k := s.place(e, routingKey)
	var res jobs.Result
	err := s.inTx(ctx, dbtx, func(tx pgx.Tx) error {
		var err error
		if res, err = kind.Enqueue(ctx, s.scopes[k].On(tx), payload, opts...); err != nil {
			return err
		}
		if res.Duplicate && !res.Replaced {
			return nil // nothing new to claim
		}
		return s.notify(ctx, tx, []wake{{k, e.Queue()}})
	})
	if err != nil {
		return jobs.Result{}, fmt.Errorf("shard %s: %w", s.names[k], err)
	}
	return res, nil
}

// EnqueueMany inserts a batch of jobs of kind across the shards, each
// placed on its own as Enqueue places a job (the item's RoutingKey taking
// EnqueueRouted's place). See Set.EnqueueBatch.
func EnqueueMany[T any](ctx context.Context, s *Set, dbtx jobs.DBTX, kind *jobs.Kind[T], items []Item[T], opts ...jobs.EnqueueOption) (jobs.BatchResult, error) {
	entries := make([]Entry, len(items))
	for i, item := range items {
		o := opts
		if len(item.Options) > 0 {
			o = append(opts[:len(opts):len(opts)], item.Options...)
		}
		entries[i] = Entry{Job: kind.Entry(item.Payload, o...), RoutingKey: item.RoutingKey}
	}
	res, err := s.enqueueBatch(ctx, dbtx, entries)
	if err != nil {
		return jobs.BatchResult{}, fmt.Errorf("enqueue many %s: %w", kind.Name(), err)
	}
	return res, nil
}

// EnqueueBatch inserts jobs of any kinds across the shards. Each entry is
// placed on its own (its sequence key's shard, else its unique key's,
// else its concurrency key's,
// else its routing key's, else the next in turn); then each shard touched
// gets one jobs.EnqueueBatch (one statement for a batch of up to 256
// plain jobs, see there), and the coordinator one pg_notify statement
// that wakes every shard and queue written to, all in one transaction
// (the caller's, or one of its own): the batch is all or nothing. A
// transaction that writes to shards on two or more nodes is committed by
// Citus in two phases, which the shards allow because they send no
// NOTIFY (Create makes them silent, migration 34). Results are in the
// entries' order.
func (s *Set) EnqueueBatch(ctx context.Context, dbtx jobs.DBTX, entries []Entry) (jobs.BatchResult, error) {
	res, err := s.enqueueBatch(ctx, dbtx, entries)
	if err != nil {
		return jobs.BatchResult{}, fmt.Errorf("enqueue batch: %w", err)
	}
	return res, nil
}

func (s *Set) enqueueBatch(ctx context.Context, dbtx jobs.DBTX, entries []Entry) (jobs.BatchResult, error) {
	if len(entries) == 0 {
		return jobs.BatchResult{Results: []jobs.Result{}}, nil
	}
	// Every entry is checked before anything is placed or written.
	for i, e := range entries {
		if e.Job.Kind() == "" {
			return jobs.BatchResult{}, fmt.Errorf("item %d: %w: an empty Entry (make entries with Kind.Entry)", i, jobs.ErrInvalidDefinition)
		}
		if err := e.Job.Err(); err != nil {
			return jobs.BatchResult{}, fmt.Errorf("item %d (%s): %w", i, e.Job.Kind(), err)
		}
	}
	groups := make([][]int, len(s.names)) // groups[k]: the entries placed in shard k, in order
	for i, e := range entries {
		k := s.place(e.Job, e.RoutingKey)
		groups[k] = append(groups[k], i)
	}
	out := jobs.BatchResult{Results: make([]jobs.Result, len(entries))}
	err := s.inTx(ctx, dbtx, func(tx pgx.Tx) error {
		var wakes []wake
		for k, idx := range groups {
			if len(idx) == 0 {
				continue
			}
			batch := make([]jobs.Entry, len(idx))
			for j, i := range idx {
				batch[j] = entries[i].Job
			}
			res, err := jobs.EnqueueBatch(ctx, s.scopes[k].On(tx), batch)
			if err != nil {
				return fmt.Errorf("shard %s: %w", s.names[k], err)
			}
			out.Inserted += res.Inserted
			out.Duplicates += res.Duplicates
			out.Replaced += res.Replaced
			for j, i := range idx {
				r := res.Results[j]
				out.Results[i] = r
				if !r.Duplicate || r.Replaced {
					wakes = append(wakes, wake{k, entries[i].Job.Queue()})
				}
			}
		}
		return s.notify(ctx, tx, wakes)
	})
	if err != nil {
		return jobs.BatchResult{}, err
	}
	return out, nil
}

// wake is a shard (by position) and a queue a job was made ready in.
type wake struct {
	shard int
	queue string
}

// notify sends one wake-up per distinct shard and queue, on the
// coordinator, in tx: payloads as the worker's notifier reads them, with
// no place in the queue, which rewinds its cursor to the start.
func (s *Set) notify(ctx context.Context, tx pgx.Tx, wakes []wake) error {
	if len(wakes) == 0 {
		return nil
	}
	slices.SortFunc(wakes, func(a, b wake) int {
		if a.shard != b.shard {
			return a.shard - b.shard
		}
		switch {
		case a.queue < b.queue:
			return -1
		case a.queue > b.queue:
			return 1
		}
		return 0
	})
	wakes = slices.Compact(wakes)
	payloads := make([]string, len(wakes))
	for i, w := range wakes {
		var err error
		if payloads[i], err = wakePayload(s.names[w.shard], w.queue); err != nil {
			return err
		}
	}
	if err := sharddb.New(tx).NotifyShards(ctx, payloads); err != nil {
		return fmt.Errorf("wake-up on the coordinator: %w", err)
	}
	return nil
}

// wakePayload is a wake-up of a shard's queue, as the worker's notifier
// reads it: no place in the queue, so its cursor goes back to the start.
func wakePayload(shard, queue string) (string, error) {
	b, err := json.Marshal(struct {
		Schema string `json:"schema"`
		Queue  string `json:"queue"`
	}{shard, queue})
	return string(b), err
}

// beginner is what can start a transaction: a pool, a connection, a
// transaction (a savepoint).
type beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// inTx runs fn in the caller's transaction when dbtx is one, else in a
// transaction begun on dbtx (nil: the Set's pool) and committed after fn.
func (s *Set) inTx(ctx context.Context, dbtx jobs.DBTX, fn func(pgx.Tx) error) error {
	if dbtx == nil {
		dbtx = s.pool
	}
	if tx, ok := dbtx.(pgx.Tx); ok {
		return fn(tx)
	}
	b, ok := dbtx.(beginner)
	if !ok {
		return errors.New("the database handle cannot begin a transaction: pass a pool, a connection or a transaction")
	}
	return pgx.BeginFunc(ctx, b, fn)
}
