package shard

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/shard/internal/sharddb"
)

// CancelJob cancels the job of that id in the shard the id names, as
// hopper.Client.CancelJob does: the error wraps hopper.ErrNotFound or
// hopper.ErrFinished when there was nothing to cancel.
func (s *Set) CancelJob(ctx context.Context, id int64) error {
	return s.CancelJobTx(ctx, s.pool, id)
}

// CancelJobTx is CancelJob on the caller's transaction.
func (s *Set) CancelJobTx(ctx context.Context, tx jobs.DBTX, id int64) error {
	res, err := s.CancelJobsTx(ctx, tx, id)
	if err != nil {
		return err
	}
	return res[0].Err
}

// CancelJobs cancels jobs across shards, as hopper.Client.CancelJobs
// does: each live job moves to the shard's dead jobs as cancelled, and the
// worker holding a running one is told by a notification on the
// coordinator, where the shards' workers listen. Each shard the ids name
// gets its own statements (lock, copy to the dead jobs, delete: Citus
// plans each as one task on the shard's node, which it does not do for
// hopper.Client's one-statement cancel), all in one transaction (the
// caller's, or one of its own, committed by Citus in two phases when the
// shards are on two nodes). One result per distinct id, in id order.
func (s *Set) CancelJobs(ctx context.Context, ids ...int64) ([]hopper.CancelResult, error) {
	return s.CancelJobsTx(ctx, s.pool, ids...)
}

// CancelJobsTx is CancelJobs on the caller's transaction: the jobs are
// cancelled, and running ones' workers told, when it commits.
func (s *Set) CancelJobsTx(ctx context.Context, tx jobs.DBTX, ids ...int64) ([]hopper.CancelResult, error) {
	ids = slices.Clone(ids)
	slices.Sort(ids)
	ids = slices.Compact(ids)
	out := make([]hopper.CancelResult, 0, len(ids))
	groups := make([][]int64, len(s.names))
	for _, id := range ids {
		if id < 1 {
			out = append(out, hopper.CancelResult{ID: id, Err: fmt.Errorf("cancel job %d: %w", id, hopper.ErrNotFound)})
			continue
		}
		k := int(id % int64(len(s.names)))
		groups[k] = append(groups[k], id)
	}
	err := s.inTx(ctx, tx, func(tx pgx.Tx) error {
		var notices []string
		for k, group := range groups {
			if len(group) == 0 {
				continue
			}
			res, told, err := s.cancelIn(ctx, tx, k, group)
			if err != nil {
				return fmt.Errorf("cancel: shard %s: %w", s.names[k], err)
			}
			out = append(out, res...)
			notices = append(notices, told...)
		}
		if len(notices) == 0 {
			return nil
		}
		if err := sharddb.New(tx).NotifyShards(ctx, notices); err != nil {
			return fmt.Errorf("cancel: tell the workers: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b hopper.CancelResult) int { return cmp.Compare(a.ID, b.ID) })
	return out, nil
}

// cancelIn cancels ids, all of shard k, in tx: their results, and the
// notices to send the workers holding the running ones.
func (s *Set) cancelIn(ctx context.Context, tx pgx.Tx, k int, ids []int64) ([]hopper.CancelResult, []string, error) {
	q := sharddb.New(s.scopes[k].On(tx))
	part, err := q.CancelPartition(ctx)
	if err != nil {
		return nil, nil, err
	}
	locked, err := q.CancelLock(ctx, ids)
	if err != nil {
		return nil, nil, err
	}
	var out []hopper.CancelResult
	var notices []string
	if len(locked) > 0 {
		p := sharddb.CancelBuryParams{}
		if part.Covered {
			p.PartitionAt = &part.At
		}
		for _, j := range locked {
			p.Ids = append(p.Ids, j.ID)
			p.Queues = append(p.Queues, j.Queue)
			p.Kinds = append(p.Kinds, j.Kind)
			p.Versions = append(p.Versions, j.Version)
			p.Payloads = append(p.Payloads, j.Payload)
			p.Priorities = append(p.Priorities, j.Priority)
			p.Attempts = append(p.Attempts, j.Attempt)
			p.MaxAttempts = append(p.MaxAttempts, j.MaxAttempts)
			p.UniqueKeys = append(p.UniqueKeys, deref(j.UniqueKey))
			p.Errors = append(p.Errors, j.Errors)
			p.CreatedAts = append(p.CreatedAts, j.CreatedAt)
			p.RunAts = append(p.RunAts, j.RunAt)
			p.Metas = append(p.Metas, j.Meta)
			p.ConcurrencyKeys = append(p.ConcurrencyKeys, deref(j.ConcurrencyKey))
		}
		if err := q.CancelBury(ctx, p); err != nil {
			return nil, nil, err
		}
		removed, err := q.CancelRemove(ctx, p.Ids)
		if err != nil {
			return nil, nil, err
		}
		if len(removed) != len(locked) {
			return nil, nil, fmt.Errorf("removed %d of the %d jobs locked", len(removed), len(locked))
		}
		woken, err := s.cancelWakes(ctx, tx, k, locked)
		if err != nil {
			return nil, nil, err
		}
		notices = append(notices, woken...)
		for _, r := range removed {
			out = append(out, hopper.CancelResult{ID: r.ID, Was: jobs.State(r.State)})
			if r.State != string(jobs.StateRunning) || r.LeaseOwner == nil {
				continue
			}
			notice, err := json.Marshal(struct {
				Schema  string `json:"schema"`
				Cancel  int64  `json:"cancel"`
				Attempt int32  `json:"attempt"`
				Owner   string `json:"owner"`
			}{s.names[k], r.ID, r.Attempt, *r.LeaseOwner})
			if err != nil {
				return nil, nil, err
			}
			notices = append(notices, string(notice))
		}
	}
	if len(out) == len(ids) {
		return out, notices, nil
	}
	done := make(map[int64]bool, len(out))
	for _, r := range out {
		done[r.ID] = true
	}
	var rest []int64
	for _, id := range ids {
		if !done[id] {
			rest = append(rest, id)
		}
	}
	finished, err := q.CancelFinished(ctx, rest)
	if err != nil {
		return nil, nil, err
	}
	states := make(map[int64]string, len(finished))
	for _, f := range finished {
		states[f.ID] = f.State
	}
	for _, id := range rest {
		state, ok := states[id]
		res := hopper.CancelResult{ID: id, Was: jobs.State(state)}
		if ok {
			res.Err = fmt.Errorf("cancel job %d: %w: it is %s", id, hopper.ErrFinished, state)
		} else {
			res.Err = fmt.Errorf("cancel job %d: %w", id, hopper.ErrNotFound)
		}
		out = append(out, res)
	}
	return out, notices, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// cancelWakes is what the shard's triggers would have announced of the
// jobs cancelled, had the shard not been silent (migration 34): when a
// job of a sequence or a workflow is cancelled, the jobs it held back
// may be ready (a sequence that continues, a workflow's steps that run on
// a parent's failure), so every queue of the shard is woken (the wake-up
// payloads returned, to send with the cancel notices); and those waiting
// for an awaited job to end are told on hopper_job_ended, here.
func (s *Set) cancelWakes(ctx context.Context, tx pgx.Tx, k int, cancelled []sharddb.CancelLockRow) ([]string, error) {
	var awaited []int64
	holds := false
	for _, j := range cancelled {
		var meta map[string]json.RawMessage
		if err := json.Unmarshal(j.Meta, &meta); err != nil {
			continue // no metadata, or none of Hopper's
		}
		if _, ok := meta[jobs.MetaSequence]; ok {
			holds = true
		}
		if _, ok := meta[jobs.MetaWorkflow]; ok {
			holds = true
		}
		if _, ok := meta["hopper.awaited"]; ok {
			awaited = append(awaited, j.ID)
		}
	}
	if len(awaited) > 0 {
		// At most 500 ids, as hopper_durable_ended sends.
		payload, err := json.Marshal(struct {
			Schema string  `json:"schema"`
			IDs    []int64 `json:"ids"`
			More   bool    `json:"more"`
		}{s.names[k], awaited[:min(len(awaited), 500)], len(awaited) > 500})
		if err != nil {
			return nil, err
		}
		if err := sharddb.New(tx).NotifyJobsEnded(ctx, string(payload)); err != nil {
			return nil, fmt.Errorf("tell the waiters: %w", err)
		}
	}
	if !holds {
		return nil, nil
	}
	queues, err := sharddb.New(s.scopes[k].On(tx)).ShardQueues(ctx)
	if err != nil {
		return nil, fmt.Errorf("the shard's queues: %w", err)
	}
	out := make([]string, len(queues))
	for i, q := range queues {
		if out[i], err = wakePayload(s.names[k], q); err != nil {
			return nil, err
		}
	}
	return out, nil
}
