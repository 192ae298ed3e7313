package shard

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/shard/internal/sharddb"
)

// Sequences and workflows live whole in one shard: a sequence's jobs in
// the shard of its key (Enqueue places a job by its sequence key first),
// a workflow's steps in the shard of the workflow's id (EnqueueWorkflow).
// Their operations by key or id are the hopper.Client's on that shard.
// What makes jobs ready there wakes the shard's workers from the
// coordinator, since the shard's own functions send no NOTIFY (migration
// 34, shard_wakes).

// GetSequence is hopper.Client.GetSequence on the shard of the key.
func (s *Set) GetSequence(ctx context.Context, key string) (hopper.SequenceInfo, error) {
	return s.GetSequenceTx(ctx, s.pool, key)
}

// GetSequenceTx is GetSequence on the caller's transaction (on the
// coordinator).
func (s *Set) GetSequenceTx(ctx context.Context, tx jobs.DBTX, key string) (hopper.SequenceInfo, error) {
	return s.clients[Position(key, len(s.names))].GetSequenceTx(ctx, tx, key)
}

// SkipSequence is hopper.Client.SkipSequence on the shard of the key: the
// blocked head stays dead and the next job runs; the shard's workers are
// woken from the coordinator at commit.
func (s *Set) SkipSequence(ctx context.Context, key string) (int64, error) {
	return s.SkipSequenceTx(ctx, s.pool, key)
}

// SkipSequenceTx is SkipSequence on the caller's transaction.
func (s *Set) SkipSequenceTx(ctx context.Context, tx jobs.DBTX, key string) (int64, error) {
	k := Position(key, len(s.names))
	var next int64
	err := s.inTx(ctx, tx, func(tx pgx.Tx) error {
		var err error
		if next, err = s.clients[k].SkipSequenceTx(ctx, tx, key); err != nil || next == 0 {
			return err
		}
		return s.wakeShards(ctx, tx, k)
	})
	return next, err
}

// RetrySequence is hopper.Client.RetrySequence on the shard of the key:
// the blocked head comes back from the dead table under its own id, with
// as many attempts again as it had, and runs again; the shard's workers
// are woken from the coordinator at commit. ErrNotBlocked when the
// sequence is not blocked; ErrNotFound when the head was purged.
func (s *Set) RetrySequence(ctx context.Context, key string) (int64, error) {
	return s.RetrySequenceTx(ctx, s.pool, key)
}

// RetrySequenceTx is RetrySequence on the caller's transaction. The head
// is revived by statements Citus plans on the shard's node
// (sql/retry.sql): Citus 13.2.2 cannot plan hopper.Client's one-statement
// retry of dead jobs through the coordinator.
func (s *Set) RetrySequenceTx(ctx context.Context, tx jobs.DBTX, key string) (int64, error) {
	k := Position(key, len(s.names))
	var head int64
	err := s.inTx(ctx, tx, func(tx pgx.Tx) error {
		info, err := s.clients[k].GetSequenceTx(ctx, tx, key)
		if err != nil {
			return err
		}
		if info.Blocked == nil {
			return hopper.ErrNotBlocked
		}
		id := info.Blocked.JobID
		q := sharddb.New(s.scopes[k].On(tx))
		d, err := q.RetryDeadLock(ctx, id)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%w: head %d is no longer in the dead table (purged or retried meanwhile); SkipSequence lets the rest run", hopper.ErrNotFound, id)
		}
		if err != nil {
			return err
		}
		ok, err := revive(ctx, q, d, string(jobs.StateWaiting))
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("head %d kept dead: a live job holds its unique key", id)
		}
		head = id
		return s.wakeShards(ctx, tx, k)
	})
	if err != nil {
		return 0, fmt.Errorf("retry sequence %q: shard %s: %w", key, s.names[k], err)
	}
	return head, nil
}

// EnqueueWorkflow is jobs.EnqueueWorkflow in the shard of the workflow's
// id (Position of the id), all or none, with one wake-up of that shard's
// workers from the coordinator, in one transaction (the caller's, or one
// of its own). Every step goes to that shard, whatever its keys: a step
// has no sequence nor unique key, and its concurrency key's limits are
// those of the shard. Parents named by id (jobs.AfterJobs) must be jobs
// of the same shard (Set.ShardOfID): a step cannot wait for a job of
// another shard.
func (s *Set) EnqueueWorkflow(ctx context.Context, dbtx jobs.DBTX, w *jobs.Workflow) (jobs.WorkflowResult, error) {
	res, err := s.EnqueueWorkflows(ctx, dbtx, []*jobs.Workflow{w})
	if err != nil {
		return jobs.WorkflowResult{}, err
	}
	return res[0], nil
}

// EnqueueWorkflows enqueues many workflows, each in the shard of its id:
// one jobs.EnqueueWorkflows per shard touched, and one pg_notify
// statement on the coordinator for all, in one transaction (the caller's,
// or one of its own): all or none, committed by Citus in two phases when
// the shards are on two or more nodes. Results are in the workflows'
// order.
func (s *Set) EnqueueWorkflows(ctx context.Context, dbtx jobs.DBTX, ws []*jobs.Workflow) ([]jobs.WorkflowResult, error) {
	out := make([]jobs.WorkflowResult, len(ws))
	if len(ws) == 0 {
		return out, nil
	}
	groups := make([][]int, len(s.names))
	for i, w := range ws {
		if w == nil {
			return nil, fmt.Errorf("enqueue workflows: workflow %d: %w: nil", i, jobs.ErrInvalidWorkflow)
		}
		k := Position(w.ID(), len(s.names))
		groups[k] = append(groups[k], i)
	}
	err := s.inTx(ctx, dbtx, func(tx pgx.Tx) error {
		var touched []int
		for k, idx := range groups {
			if len(idx) == 0 {
				continue
			}
			batch := make([]*jobs.Workflow, len(idx))
			for j, i := range idx {
				batch[j] = ws[i]
			}
			res, err := jobs.EnqueueWorkflows(ctx, s.scopes[k].On(tx), batch)
			if err != nil {
				return fmt.Errorf("shard %s: %w", s.names[k], err)
			}
			for j, i := range idx {
				out[i] = res[j]
			}
			touched = append(touched, k)
		}
		return s.wakeShards(ctx, tx, touched...)
	})
	if err != nil {
		return nil, fmt.Errorf("enqueue workflows: %w", err)
	}
	return out, nil
}

// ListWorkflow is hopper.Client.ListWorkflow on the shard of the
// workflow's id.
func (s *Set) ListWorkflow(ctx context.Context, id string) ([]hopper.WorkflowStep, error) {
	return s.ListWorkflowTx(ctx, s.pool, id)
}

// ListWorkflowTx is ListWorkflow on the caller's transaction.
func (s *Set) ListWorkflowTx(ctx context.Context, tx jobs.DBTX, id string) ([]hopper.WorkflowStep, error) {
	return s.clients[Position(id, len(s.names))].ListWorkflowTx(ctx, tx, id)
}

// CancelWorkflow cancels every live step of a workflow, as
// hopper.Client.CancelWorkflow does (a running step's worker is told, on
// the coordinator), in the shard of the workflow's id, and returns their
// ids. The steps are cancelled as CancelJobs cancels jobs, in rounds
// until a round finds no new live step.
func (s *Set) CancelWorkflow(ctx context.Context, id string) ([]int64, error) {
	return s.CancelWorkflowTx(ctx, s.pool, id)
}

// CancelWorkflowTx is CancelWorkflow on the caller's transaction.
func (s *Set) CancelWorkflowTx(ctx context.Context, tx jobs.DBTX, id string) ([]int64, error) {
	k := Position(id, len(s.names))
	out := []int64{}
	err := s.inTx(ctx, tx, func(tx pgx.Tx) error {
		tried := map[int64]bool{}
		for round := 0; ; round++ {
			live, err := db.New(s.scopes[k].On(tx)).LiveWorkflowSteps(ctx, id)
			if err != nil {
				return err
			}
			var ids []int64
			for _, step := range live {
				if !tried[step] {
					tried[step] = true
					ids = append(ids, step)
				}
			}
			if len(ids) == 0 {
				return nil
			}
			if round == maxCancelRounds {
				return fmt.Errorf("steps were still being added after %d rounds", round)
			}
			res, notices, err := s.cancelIn(ctx, tx, k, ids)
			if err != nil {
				return err
			}
			if len(notices) > 0 {
				if err := sharddb.New(tx).NotifyShards(ctx, notices); err != nil {
					return fmt.Errorf("tell the workers: %w", err)
				}
			}
			for _, r := range res {
				if r.Err == nil {
					out = append(out, r.ID)
				}
			}
		}
	})
	if err != nil {
		return nil, fmt.Errorf("cancel workflow %q: shard %s: %w", id, s.names[k], err)
	}
	slices.Sort(out)
	return out, nil
}

// maxCancelRounds bounds CancelWorkflow's rounds, as hopper.Client's.
const maxCancelRounds = 100

// RetryWorkflow is hopper.Client.RetryWorkflow on the shard of the
// workflow's id; the shard's workers are woken from the coordinator at
// commit.
func (s *Set) RetryWorkflow(ctx context.Context, id string) ([]int64, error) {
	return s.RetryWorkflowTx(ctx, s.pool, id)
}

// RetryWorkflowTx is RetryWorkflow on the caller's transaction. The steps
// are revived by statements Citus plans on the shard's node
// (sql/retry.sql): Citus 13.2.2 cannot plan hopper_workflow_retry through
// the coordinator. Revivals of one workflow take turns on the
// coordinator (the workflow's advisory lock, taken there).
func (s *Set) RetryWorkflowTx(ctx context.Context, tx jobs.DBTX, id string) ([]int64, error) {
	k := Position(id, len(s.names))
	ids := []int64{}
	err := s.inTx(ctx, tx, func(tx pgx.Tx) error {
		q := sharddb.New(s.scopes[k].On(tx))
		if err := q.RetryWorkflowTurn(ctx, id); err != nil {
			return err
		}
		dead, err := q.RetryWorkflowLock(ctx, id)
		if err != nil || len(dead) == 0 {
			return err
		}
		stepIDs := make([]int64, len(dead))
		for i, d := range dead {
			stepIDs[i] = d.ID
		}
		children, err := q.RetryWithParents(ctx, stepIDs)
		if err != nil {
			return err
		}
		for _, d := range dead {
			state := jobs.StatePending
			if slices.Contains(children, d.ID) {
				state = jobs.StateWaiting
			}
			ok, err := revive(ctx, q, sharddb.RetryDeadLockRow(d), string(state))
			if err != nil {
				return fmt.Errorf("step %d: %w", d.ID, err)
			}
			if ok {
				ids = append(ids, d.ID)
			}
		}
		if len(ids) == 0 {
			return nil
		}
		return s.wakeShards(ctx, tx, k)
	})
	if err != nil {
		return nil, fmt.Errorf("retry workflow %q: shard %s: %w", id, s.names[k], err)
	}
	return ids, nil
}

// revive moves a dead job, locked, back to the live table under its own
// id, in the state given, with as many attempts again as it had (up to
// the integer's limit), as RetryDead does; false when a live job holds
// its unique key again (it stays dead).
func revive(ctx context.Context, q *sharddb.Queries, d sharddb.RetryDeadLockRow, state string) (bool, error) {
	revived, err := q.RetryRevive(ctx, sharddb.RetryReviveParams{
		ID: d.ID, Queue: d.Queue, Kind: d.Kind, Version: d.Version, Payload: d.Payload, Priority: d.Priority,
		Attempt: d.Attempt, MaxAttempts: int32(min(int64(d.Attempt)+int64(d.MaxAttempts), math.MaxInt32)),
		UniqueKey: deref(d.UniqueKey), Errors: d.Errors, CreatedAt: d.CreatedAt, Meta: d.Meta,
		ConcurrencyKey: deref(d.ConcurrencyKey), State: state})
	if err != nil || len(revived) == 0 {
		return false, err
	}
	return true, q.RetryDeadRemove(ctx, d.ID)
}

// wakeShards wakes every queue of the shards (by position) on the
// coordinator, in tx: for jobs made ready where the queues are not known
// (the shards' own functions send no NOTIFY). A shard's queues are those
// its workers registered; a queue no worker has served yet has no worker
// to wake.
func (s *Set) wakeShards(ctx context.Context, tx pgx.Tx, shards ...int) error {
	var wakes []wake
	for _, k := range slices.Compact(slices.Sorted(slices.Values(shards))) {
		queues, err := sharddb.New(s.scopes[k].On(tx)).ShardQueues(ctx)
		if err != nil {
			return fmt.Errorf("shard %s: its queues: %w", s.names[k], err)
		}
		for _, q := range queues {
			wakes = append(wakes, wake{k, q})
		}
	}
	return s.notify(ctx, tx, wakes)
}
