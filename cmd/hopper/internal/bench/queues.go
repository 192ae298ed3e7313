package bench

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hopperq/hopper/jobs"
)

// QueuesResult is one drain of the queues mode: the same backlog and the
// same slots, split over Queues queues.
type QueuesResult struct {
	Queues        int     `json:"queues"`
	SlotsPerQueue int     `json:"slots_per_queue"`
	Jobs          int     `json:"jobs"`
	Seconds       float64 `json:"seconds"`
	JobsPerSecond float64 `json:"jobs_per_second"`
	// Ratio is JobsPerSecond over the first count's (the fewest queues).
	Ratio float64 `json:"ratio"`
	// Statements is what each of Hopper's statements cost the server.
	Statements []StatementCost `json:"statements,omitempty"`
}

// runQueues drains cfg.Jobs once per cfg.QueueCounts, each on a schema of
// its own, with one worker process whose slots are split over the queues.
func runQueues(ctx context.Context, cfg Config, logf func(string, ...any)) ([]*QueuesResult, error) {
	var out []*QueuesResult
	for _, n := range cfg.QueueCounts {
		slots := max(1, cfg.Concurrency/n)
		logf("queues: %d jobs over %d queues of %d slots each, %d worker(s)", cfg.Jobs, n, slots, cfg.Workers)
		sized := cfg
		sized.queues = n
		d, err := runDrain(ctx, sized)
		if err != nil {
			return out, fmt.Errorf("%d queues: %w", n, err)
		}
		q := &QueuesResult{Queues: n, SlotsPerQueue: slots, Jobs: d.Jobs, Seconds: d.Seconds, JobsPerSecond: d.JobsPerSecond,
			Statements: d.Statements}
		if len(out) > 0 && out[0].JobsPerSecond > 0 {
			q.Ratio = q.JobsPerSecond / out[0].JobsPerSecond
		} else {
			q.Ratio = 1
		}
		out = append(out, q)
	}
	return out, nil
}

// queueNames names n queues: the default queue alone for n < 2, else
// q000, q001, …
func queueNames(n int) []string {
	if n < 2 {
		return []string{jobs.DefaultQueue}
	}
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("q%03d", i)
	}
	return names
}

// enqueueSpread enqueues n no-op jobs with COPY, spread evenly over the
// queues, in batches of 5,000 per queue at most.
func enqueueSpread(ctx context.Context, pool *pgxpool.Pool, n int, queues []string, payload benchJob) error {
	for i, q := range queues {
		share := n / len(queues)
		if i < n%len(queues) {
			share++
		}
		items := jobs.Items(repeat(payload, min(share, 5000))...)
		for left := share; left > 0; left -= len(items) {
			if _, err := noop.EnqueueMany(ctx, pool, items[:min(len(items), left)], jobs.Queue(q)); err != nil {
				return err
			}
		}
	}
	return nil
}
