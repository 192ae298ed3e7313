package shard

import (
	"cmp"
	"context"
	"encoding/base64"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/jobs"
)

// Operations by id: the id names its shard (id mod Count), so each is
// the hopper.Client's operation on that one shard, one node.

// client is the hopper.Client of the shard that id names; ok is false for
// an id below 1, which no job has.
func (s *Set) client(id int64) (*hopper.Client, bool) {
	if id < 1 {
		return nil, false
	}
	return s.clients[id%int64(len(s.names))], true
}

// GetJob is hopper.Client.GetJob on the shard the id names.
func (s *Set) GetJob(ctx context.Context, id int64) (jobs.Row, error) {
	return s.GetJobTx(ctx, s.pool, id)
}

// GetJobTx is GetJob on the caller's transaction (on the coordinator).
func (s *Set) GetJobTx(ctx context.Context, tx jobs.DBTX, id int64) (jobs.Row, error) {
	c, ok := s.client(id)
	if !ok {
		return jobs.Row{}, fmt.Errorf("job %d: %w", id, hopper.ErrNotFound)
	}
	return c.GetJobTx(ctx, tx, id)
}

// DeleteJob is hopper.Client.DeleteJob on the shard the id names. A job
// of a sequence or a workflow may leave the next job or step ready, which
// the silent shard does not announce: once the delete has committed, the
// shard's queues are woken on the coordinator.
func (s *Set) DeleteJob(ctx context.Context, id int64) (jobs.Row, error) {
	c, ok := s.client(id)
	if !ok {
		return jobs.Row{}, fmt.Errorf("delete job %d: %w", id, hopper.ErrNotFound)
	}
	row, err := c.DeleteJob(ctx, id)
	if err != nil {
		return row, err
	}
	_, seq := row.Meta[jobs.MetaSequence]
	_, flow := row.Meta[jobs.MetaWorkflow]
	if seq || flow {
		k := int(id % int64(len(s.names)))
		if err := s.inTx(ctx, s.pool, func(tx pgx.Tx) error { return s.wakeShards(ctx, tx, k) }); err != nil {
			return row, fmt.Errorf("delete job %d: deleted; waking its shard's workers: %w", id, err)
		}
	}
	return row, nil
}

// WakeJob is hopper.Client.WakeJob on the shard the id names.
func (s *Set) WakeJob(ctx context.Context, id int64) (hopper.StepKind, error) {
	c, ok := s.client(id)
	if !ok {
		return "", fmt.Errorf("wake job %d: %w", id, hopper.ErrNotFound)
	}
	return c.WakeJob(ctx, id)
}

// GetJobProgress is hopper.Client.GetJobProgress on the shard the id
// names.
func (s *Set) GetJobProgress(ctx context.Context, id int64) (jobs.Progress, error) {
	c, ok := s.client(id)
	if !ok {
		return jobs.Progress{}, fmt.Errorf("job %d: %w", id, hopper.ErrNotFound)
	}
	return c.GetJobProgress(ctx, id)
}

// ListJobSteps is hopper.Client.ListJobSteps on the shard the id names.
func (s *Set) ListJobSteps(ctx context.Context, id int64) ([]hopper.JobStep, error) {
	c, ok := s.client(id)
	if !ok {
		return nil, fmt.Errorf("job %d: %w", id, hopper.ErrNotFound)
	}
	return c.ListJobSteps(ctx, id)
}

// Reads across shards: each shard is read (up to eight at once) and the
// answers merged. Their cost grows with the shard count.

// ListJobs is hopper.Client.ListJobs across every shard: each shard's
// page of the same filters and limit, merged by id, highest first, and
// cut to the limit. Ids are unique across shards, so a page's Next
// cursor (the last id listed) continues every shard at once. Within a
// shard a higher id is a newer job; across shards the order is by id, not
// strictly by creation time (each shard's ids advance at its own pace).
func (s *Set) ListJobs(ctx context.Context, p hopper.ListParams) (hopper.JobPage, error) {
	limit := p.Limit
	if limit == 0 {
		limit = hopper.DefaultListLimit
	}
	pages := make([]hopper.JobPage, len(s.names))
	err := s.fanOut(ctx, func(ctx context.Context, k int, c *hopper.Client) error {
		var err error
		pages[k], err = c.ListJobs(ctx, p)
		return err
	})
	if err != nil {
		return hopper.JobPage{}, fmt.Errorf("list jobs: %w", err)
	}
	more := false
	var all []jobs.Row
	for _, page := range pages {
		all = append(all, page.Jobs...)
		more = more || page.Next != ""
	}
	slices.SortFunc(all, func(a, b jobs.Row) int { return cmp.Compare(b.ID, a.ID) })
	out := hopper.JobPage{Jobs: all}
	if len(all) > limit {
		out.Jobs, more = all[:limit], true
	}
	if more && len(out.Jobs) > 0 {
		out.Next = listCursor(out.Jobs[len(out.Jobs)-1].ID)
	}
	return out, nil
}

// listCursor is hopper.ListJobs' cursor after the job of that id, which
// every shard's ListJobs reads: the jobs below that id. (The cursor's
// form, "j" and the id in unpadded base64url, is the root package's;
// TestListCursorIsTheClients checks that both agree.)
func listCursor(lastID int64) string {
	return base64.RawURLEncoding.EncodeToString([]byte("j" + strconv.FormatInt(lastID, 10)))
}

// ShardStats is one shard's stats.
type ShardStats struct {
	Shard string
	hopper.Stats
}

// ListShardStats is hopper.Client.GetStats of every shard, in position
// order.
func (s *Set) ListShardStats(ctx context.Context) ([]ShardStats, error) {
	out := make([]ShardStats, len(s.names))
	err := s.fanOut(ctx, func(ctx context.Context, k int, c *hopper.Client) error {
		st, err := c.GetStats(ctx)
		out[k] = ShardStats{Shard: s.names[k], Stats: st}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("stats: %w", err)
	}
	return out, nil
}

// GetStats is hopper.Client.GetStats added up across every shard: one
// row per queue and kind (a queue is Paused when it is paused in any
// shard), Total over all, Enqueued and Finished summed, At the latest
// shard's reading. Each shard is read at its own moment, so the sum is
// not one snapshot.
func (s *Set) GetStats(ctx context.Context) (hopper.Stats, error) {
	per, err := s.ListShardStats(ctx)
	if err != nil {
		return hopper.Stats{}, err
	}
	type qk struct{ queue, kind string }
	rows := map[qk]*hopper.StatsRow{}
	var out hopper.Stats
	for _, st := range per {
		if st.At.After(out.At) {
			out.At = st.At
		}
		out.Enqueued += st.Enqueued
		out.Finished += st.Finished
		out.Total.Add(st.Total)
		for _, r := range st.Rows {
			row := rows[qk{r.Queue, r.Kind}]
			if row == nil {
				row = &hopper.StatsRow{Queue: r.Queue, Kind: r.Kind}
				rows[qk{r.Queue, r.Kind}] = row
			}
			row.Paused = row.Paused || r.Paused
			row.Counts.Add(r.Counts)
		}
	}
	out.Rows = make([]hopper.StatsRow, 0, len(rows))
	for _, r := range rows {
		out.Rows = append(out.Rows, *r)
	}
	slices.SortFunc(out.Rows, func(a, b hopper.StatsRow) int {
		return cmp.Or(strings.Compare(a.Queue, b.Queue), strings.Compare(a.Kind, b.Kind))
	})
	if out.At.IsZero() {
		out.At = time.Now()
	}
	return out, nil
}
