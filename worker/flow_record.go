package worker

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/migrated"
	"github.com/hopperq/hopper/internal/worker/producer"
)

// flowOf is the flow control the queue name is claimed under: its
// Config.FlowControl, an empty one when some kind sets a key limit of its
// own (byKind), or none (nil).
func flowOf(cfg *Config, name string, byKind bool) *producer.Flow {
	f, ok := cfg.FlowControl[name]
	if !ok && !byKind {
		return nil
	}
	return &producer.Flow{KeyLimit: f.KeyLimit, Fair: f.Fair, PriorityAging: f.PriorityAging,
		Rate: producer.Rate{Limit: f.Rate.Limit, Per: f.Rate.Per, By: string(f.Rate.By), Local: f.Rate.Local, ExactStarts: f.Rate.ExactStarts}}
}

// describeFlow is a queue's FlowControl as this worker records it in
// hopper_queues: its settings in a fixed order, "" for none. A kind's own
// KeyLimit is left out: workers may run different kinds.
func describeFlow(f FlowControl) string {
	var parts []string
	if f.KeyLimit > 0 {
		parts = append(parts, fmt.Sprintf("key_limit=%d", f.KeyLimit))
	}
	if f.Rate.Limit > 0 {
		by := f.Rate.By
		if by == "" {
			by = RateByQueue
		}
		rate := fmt.Sprintf("rate=%d/%s by %s", f.Rate.Limit, f.Rate.Per, by)
		if f.Rate.Local {
			rate += " local"
		}
		if f.Rate.ExactStarts {
			rate += " exact_starts"
		}
		parts = append(parts, rate)
	}
	if f.Fair {
		parts = append(parts, "fair")
	}
	if f.PriorityAging > 0 {
		parts = append(parts, "priority_aging="+f.PriorityAging.String())
	}
	return strings.Join(parts, " ")
}

// recordFlow records the flow control this worker runs each of its queues
// with, and warns about every queue whose record, made by another worker,
// says otherwise: the limits hold only if all of a queue's workers claim
// by the same rules. It runs once, at start, after the queues are
// registered; the last worker to start is the record.
func (r *run) recordFlow(ctx context.Context) error {
	w := r.w
	names := make([]string, 0, len(r.producers))
	for name := range r.producers {
		names = append(names, name)
	}
	sort.Strings(names)
	flows := make([]string, len(names))
	for i, name := range names {
		flows[i] = describeFlow(w.cfg.FlowControl[name])
	}
	differ, err := w.q.RecordFlowControl(ctx, db.RecordFlowControlParams{Worker: w.cfg.ID, Names: names, Flows: flows})
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == pgerrcode.UndefinedColumn { // undefined_column
		return migrated.Errorf(w.migrateUp(), "schema %s lacks hopper_queues.flow_control, which migration %s adds", r.schema, migrated.Migration(7))
	}
	if err != nil {
		return fmt.Errorf("worker: start: record flow control: %w", err)
	}
	for _, d := range differ {
		w.log.Warn("flow control differs from the one another worker of the queue recorded: every worker of a queue must be given the same FlowControl, or its limits do not hold",
			"queue", d.Name, "flow_control", describedOrNone(describeFlow(w.cfg.FlowControl[d.Name])),
			"other_worker", d.FlowControlBy, "other_flow_control", describedOrNone(d.FlowControl), "recorded_at", d.FlowControlAt)
	}
	return nil
}

func describedOrNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
