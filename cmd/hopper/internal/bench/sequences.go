package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hopperq/hopper/jobs"
)

// The sequences mode: what running jobs one at a time per key costs, set
// beside what keys cost without and with flow control. Four kinds of the
// continuous run (produce and work at once, the same worker process, the
// same producers and backlog), each in a scratch schema of its own on the
// same server, in one session:
//
//   - keyless: no key at all;
//   - keys: every job spread over Keys concurrency keys, no flow control
//     (the plain claim): what carrying a key costs by itself;
//   - keys_limit: the same keys, the workers limited to KeyLimit running
//     jobs per key (the flow-controlled claim);
//   - sequences: every job spread over Keys sequence keys (jobs.Sequence):
//     one runs at a time per key, the others wait outside the ready index,
//     and each ack promotes the next in its own transaction (a trigger).
//     The producers keep the usual backlog (20 batches, 100,000 jobs at the
//     default batch size), so about 100 jobs wait behind each of 1,000
//     keys' heads; enqueueing takes each key's advisory lock, then the
//     commit places every job (a deferred trigger).
//
// Each kind runs twice, in the order keyless, keys, keys_limit, sequences,
// then the reverse: a mirror, so that every kind's two runs sit at the same
// mean position in the session (1st and 8th, 2nd and 7th …), and whatever
// drifts steadily over the runs (the scratch cluster's autovacuum and
// checkpoints, which start a minute in, the machine's other load) weighs
// on each kind alike; keyless, the reference, is first and last. The
// figure of a kind is the mean of its two runs' steady states, and its
// ratio is that over keyless's.

// SequencesResult is the sequences mode's report.
type SequencesResult struct {
	Keys     int `json:"keys"`
	KeyLimit int `json:"key_limit"`
	// Order is the kinds' names in the order they ran.
	Order []string `json:"order"`
	// Rows is one row per kind: keyless, keys, keys_limit, sequences.
	Rows []*SequencesRow `json:"rows"`
	// DrainKeyless and DrainSequences are drains of the same backlog,
	// Keys × 100 jobs, keyless and spread over Keys sequence keys (100
	// each), run keyless, sequences, sequences, keyless; DrainRatio is the
	// sequences' mean rate over keyless's. No producer runs: the claim,
	// the acknowledgement and the promotion alone.
	DrainKeyless   []*DrainResult `json:"drain_keyless"`
	DrainSequences []*DrainResult `json:"drain_sequences"`
	DrainRatio     float64        `json:"drain_ratio"`
	// Plans, with --explain: EXPLAIN (ANALYZE, BUFFERS) of the sequence
	// promotion and of the multi-queue claim over a table of waiting jobs.
	Plans *SequencePlans `json:"plans,omitempty"`
}

// SequencesRow is one kind of the sequences mode.
type SequencesRow struct {
	Name  string `json:"name"`
	Label string `json:"label"`
	// Runs are its continuous runs, in the order they ran.
	Runs []*ContinuousResult `json:"runs"`
	// SteadyWorkedPerSecond is the mean of the runs' steady states, and
	// Ratio that over keyless's.
	SteadyWorkedPerSecond float64 `json:"steady_worked_per_second"`
	Ratio                 float64 `json:"ratio_to_keyless"`
}

// sequenceKind is how one kind differs from the plain continuous run.
type sequenceKind struct {
	name, label string
	keyed       int // concurrency keys
	sequenced   int // sequence keys
	flow        workerFlow
}

// sequencesOrder is the kinds' indexes in the order they run: forward,
// then mirrored (see above).
var sequencesOrder = []int{0, 1, 2, 3, 3, 2, 1, 0}

func runSequences(ctx context.Context, cfg Config, logf func(string, ...any)) (*SequencesResult, error) {
	base := cfg
	base.HoldSnapshot, base.Burst, base.Recover, base.keep, base.Scheduled = false, 0, 0, 0, 0
	base.Duration = cfg.SequenceDuration
	// At least four windows, so that the steady state (the last half) is
	// not one window alone.
	base.Window = min(cfg.window(), max(time.Second, cfg.SequenceDuration/4))
	kinds := []sequenceKind{
		{name: "keyless", label: "keyless"},
		{name: "keys", label: KeysLabel(cfg.Keys, 0), keyed: cfg.Keys},
		{name: "keys_limit", label: KeysLabel(cfg.Keys, cfg.KeyLimit), keyed: cfg.Keys, flow: workerFlow{keyLimit: cfg.KeyLimit}},
		{name: "sequences", label: fmt.Sprintf("%d sequence keys", cfg.Keys), sequenced: cfg.Keys},
	}
	r := &SequencesResult{Keys: cfg.Keys, KeyLimit: cfg.KeyLimit}
	for _, k := range kinds {
		r.Rows = append(r.Rows, &SequencesRow{Name: k.name, Label: k.label})
	}
	for i, ki := range sequencesOrder {
		k := kinds[ki]
		run := base
		run.keyed, run.sequenced, run.flow = k.keyed, k.sequenced, k.flow
		logf("sequences: run %d of %d: %s, %v", i+1, len(sequencesOrder), k.label, run.Duration)
		c, err := continuousOnce(ctx, run, 0)
		if err != nil {
			return r, fmt.Errorf("%s: %w", k.label, err)
		}
		r.Order = append(r.Order, k.name)
		r.Rows[ki].Runs = append(r.Rows[ki].Runs, c)
	}
	// The drains: the same backlog, keyless then by sequence, mirrored.
	drain := cfg
	drain.Jobs, drain.Scheduled = cfg.Keys*100, 0
	for _, sequenced := range []bool{false, true, true, false} {
		run, label, into := drain, "keyless", &r.DrainKeyless
		if sequenced {
			run.sequenced, label, into = cfg.Keys, fmt.Sprintf("%d sequence keys", cfg.Keys), &r.DrainSequences
		}
		logf("sequences: drain of %d jobs, %s", run.Jobs, label)
		d, err := runDrain(ctx, run)
		if err != nil {
			return r, fmt.Errorf("drain, %s: %w", label, err)
		}
		*into = append(*into, d)
	}
	if k := meanDrain(r.DrainKeyless); k > 0 {
		r.DrainRatio = meanDrain(r.DrainSequences) / k
	}
	for _, row := range r.Rows {
		row.SteadyWorkedPerSecond = meanSteady(row.Runs)
		if keyless := r.Rows[0].SteadyWorkedPerSecond; keyless > 0 {
			row.Ratio = row.SteadyWorkedPerSecond / keyless
		}
	}
	if cfg.Explain {
		logf("sequences: EXPLAIN over %d jobs in %d sequences", cfg.ExplainJobs, cfg.Keys)
		var err error
		if r.Plans, err = explainSequences(ctx, cfg.DatabaseURL, cfg.ExplainJobs, cfg.Keys); err != nil {
			return r, fmt.Errorf("explain: %w", err)
		}
	}
	return r, nil
}

// enqueueSequenced enqueues n jobs spread round-robin over keys sequence
// keys, in batches of 5,000: a drain's backlog of n/keys jobs per key.
func enqueueSequenced(ctx context.Context, pool *pgxpool.Pool, n, keys int, payload benchJob) error {
	for left := n; left > 0; left -= 5000 {
		if _, err := noop.EnqueueMany(ctx, pool, sequenceItems(payload, min(left, 5000), keys, "seq-", nil)); err != nil {
			return err
		}
	}
	return nil
}

// sequenceItems is n jobs spread round-robin over keys sequence keys named
// prefix0, prefix1 …, the key's queue queues[key % len(queues)] (none
// given: the default queue).
func sequenceItems(payload benchJob, n, keys int, prefix string, queues []string) []jobs.Item[benchJob] {
	items := jobs.Items(repeat(payload, n)...)
	for i := range items {
		k := i % keys
		items[i].Options = []jobs.EnqueueOption{jobs.Sequence(fmt.Sprintf("%s%d", prefix, k))}
		if len(queues) > 0 {
			items[i].Options = append(items[i].Options, jobs.Queue(queues[k%len(queues)]))
		}
	}
	return items
}

// Print writes the mode's table: each kind's steady state (the mean of
// its runs', each run's in brackets) and its ratio to keyless; then, per
// run, where the server's time went; then the plans, if asked for.
func (r *SequencesResult) Print(w io.Writer) {
	fmt.Fprintf(w, "sequences: continuous runs in the order %s; steady state = mean of the last half of each run's windows\n",
		strings.Join(r.Order, ", "))
	fmt.Fprintf(w, "  %-34s %12s %8s   %s\n", "kind", "steady jobs/s", "ratio", "runs (steady jobs/s)")
	for _, row := range r.Rows {
		runs := make([]float64, len(row.Runs))
		for i, c := range row.Runs {
			runs[i] = c.SteadyWorkedPerSecond
		}
		fmt.Fprintf(w, "  %-34s %12.0f %8.2f   %s\n", row.Label, row.SteadyWorkedPerSecond, row.Ratio, rateList(runs))
	}
	for _, row := range r.Rows {
		for i, c := range row.Runs {
			fmt.Fprintf(w, "  %s, run %d: %.0f jobs/s worked, %.0f enqueued; CPU per 1000 jobs: worker %.3fs, PostgreSQL %.3fs; windows %s\n",
				row.Label, i+1, c.WorkedPerSecond, c.EnqueuedPerSecond, c.WorkerCPUPer1000, c.PostgresCPUPer1000, rateList(c.Windows))
			if c.EnqueueRetries > 0 {
				fmt.Fprintf(w, "    %d enqueue batches refused at commit by hopper_jobs_sequence_head_idx (a commit racing a head's ack), sent again\n", c.EnqueueRetries)
			}
			for j, st := range c.Statements {
				if j == 4 {
					break
				}
				fmt.Fprintf(w, "    %-18s %9d calls  %9.0f ms  %7.3f ms/call  %8.1f buffers/call\n", st.Name, st.Calls, st.TotalMs, st.MeanMs, st.BuffersPerCall)
			}
		}
	}
	if len(r.DrainKeyless)+len(r.DrainSequences) > 0 {
		fmt.Fprintf(w, "sequences: drains of the same backlog (keys x 100 jobs), keyless, sequences, sequences, keyless; no producer\n")
		for _, d := range []struct {
			label string
			runs  []*DrainResult
		}{{"keyless", r.DrainKeyless}, {fmt.Sprintf("%d sequence keys, 100 jobs each", r.Keys), r.DrainSequences}} {
			rates := make([]float64, len(d.runs))
			for i, run := range d.runs {
				rates[i] = run.JobsPerSecond
			}
			fmt.Fprintf(w, "  %-34s %12.0f jobs/s   runs %s\n", d.label, meanDrain(d.runs), rateList(rates))
			for _, run := range d.runs {
				for j, st := range run.Statements {
					if j == 4 {
						break
					}
					fmt.Fprintf(w, "    %-18s %9d calls  %9.0f ms  %7.3f ms/call  %8.1f buffers/call\n", st.Name, st.Calls, st.TotalMs, st.MeanMs, st.BuffersPerCall)
				}
			}
		}
		fmt.Fprintf(w, "  drain ratio sequences/keyless: %.2f\n", r.DrainRatio)
	}
	if p := r.Plans; p != nil {
		p.Print(w)
	}
}

// headRace reports the failure of a commit of sequence jobs that raced an
// ack of their key's head (schema version 13): the commit's placement
// waits for the head's row lock, finds the head gone once the ack commits,
// but with its statement's older snapshot not the job the ack promoted,
// and promotes a second head, which the unique index
// hopper_jobs_sequence_head_idx refuses. The whole batch rolls back; the
// producers send it again and count it (EnqueueRetries), so that the run
// measures the rest. Reproduced with psql: delete a head in one session
// and hold the transaction; in another, enqueue a job of that key and
// commit (it waits); commit the first: the second fails.
func headRace(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == pgerrcode.UniqueViolation && pgErr.ConstraintName == "hopper_jobs_sequence_head_idx"
}

// meanDrain is the mean rate of drains.
func meanDrain(runs []*DrainResult) float64 {
	if len(runs) == 0 {
		return 0
	}
	sum := 0.0
	for _, d := range runs {
		sum += d.JobsPerSecond
	}
	return sum / float64(len(runs))
}

// rateList prints rates compactly, whole jobs per second.
func rateList(xs []float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprintf("%.0f", x)
	}
	return strings.Join(parts, " ")
}
