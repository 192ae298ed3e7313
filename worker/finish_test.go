package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/worker/completer"
	"github.com/hopperq/hopper/internal/worker/executor"
	"github.com/hopperq/hopper/jobs"
)

// newBareRun is a run of a worker with cfg, without a database, and a
// held job for it to run.
func newBareRun(cfg Config) (*run, *heldJob) {
	held := &heldJobs{abandonAfter: 10 * time.Second}
	w := &Worker{cfg: cfg, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	return &run{w: w, hard: context.Background()}, &heldJob{id: 1, attempt: 1, kind: "k", held: held}
}

// runOne runs d on an executor (internal/worker/executor) as the worker
// wires it, and returns what the run returned.
func (r *run) runOne(t *testing.T, d dispatched) executor.Result {
	t.Helper()
	got := make(chan executor.Result, 1)
	e, err := executor.New(executor.Config[dispatched, *heldJob]{Queues: []string{"q"}, Base: context.Background(),
		Begin: (*heldJob).begin, Call: r.call, Failed: r.failed,
		Finish: func(_ dispatched, res executor.Result) { got <- res }})
	require.NoError(t, err)
	e.Queue("q").Dispatch(d)
	res := <-got
	e.Close()
	require.True(t, e.WaitGoroutines(time.Now().Add(time.Minute)))
	require.Empty(t, e.Running(), "a finished run is no longer in flight")
	return res
}

// A run goes through the worker's middleware, then the kind's, outermost
// first; the handler's context carries its job; a panic in middleware is
// the run's error, and the error hooks see it.
func TestHandlerRunsThroughMiddlewareAndHooks(t *testing.T) {
	t.Parallel()
	var order []string
	var told []error
	mw := func(name string) Middleware {
		return func(ctx context.Context, job *jobs.Row, next func(context.Context) error) error {
			order = append(order, name)
			return next(ctx)
		}
	}
	r, c := newBareRun(Config{
		Middleware: []Middleware{mw("worker")},
		OnError:    []ErrorHook{func(_ context.Context, _ *jobs.Row, err error) { told = append(told, err) }},
	})
	c.view = &jobs.Row{ID: c.id, Kind: c.kind}
	d := dispatched{h: &handler{middleware: []Middleware{mw("kind")}}, job: c, timeout: time.Minute,
		call: func(ctx context.Context) (json.RawMessage, error) {
			require.Same(t, c, ctx.Value(heldJobKey{}), "the handler's context carries its job")
			return json.RawMessage(`{"ok":true}`), nil
		}}
	res := r.runOne(t, d)
	require.NoError(t, res.Err)
	require.JSONEq(t, `{"ok":true}`, string(res.Value))
	require.Equal(t, []string{"worker", "kind"}, order)
	require.Empty(t, told)

	d.h = &handler{middleware: []Middleware{func(context.Context, *jobs.Row, func(context.Context) error) error {
		panic("in middleware")
	}}}
	var pe *PanicError
	require.ErrorAs(t, r.runOne(t, d).Err, &pe)
	require.Len(t, told, 1)
	require.ErrorAs(t, told[0], &pe)
}

// The verdict of a handler's return: success acks, a plain error retries
// after the worker's backoff, RetryAfter after its own, Permanent and
// Cancel end the job, Snooze waits uncharged.
func TestHandlerVerdicts(t *testing.T) {
	t.Parallel()
	wr, c := newBareRun(Config{RetryBackoff: Backoff{Base: time.Minute, Max: time.Minute}})
	row := db.HopperJob{ID: c.id, Attempt: 1, Kind: "k"}
	h := &handler{}
	boom := errors.New("boom")

	require.Equal(t, completer.ActionAck, wr.completion(h, row, c, nil).Action)

	r := wr.completion(h, row, c, boom)
	require.Equal(t, completer.ActionRetry, r.Action)
	require.Equal(t, "boom", r.Message)
	require.Equal(t, time.Minute, r.Backoff)

	r = wr.completion(h, row, c, RetryAfter(time.Hour, boom))
	require.Equal(t, completer.ActionRetry, r.Action)
	require.InDelta(t, time.Hour, r.Backoff, float64(time.Minute))

	require.Equal(t, completer.ActionDead, wr.completion(h, row, c, Permanent(boom)).Action)
	require.Equal(t, completer.ActionCancel, wr.completion(h, row, c, Cancel(boom)).Action)

	r = wr.completion(h, row, c, Snooze(time.Hour))
	require.Equal(t, completer.ActionSnooze, r.Action)
	require.InDelta(t, time.Hour, r.Backoff, float64(time.Minute))
}

// A failed run's log line says retry_in only for a job that is retried,
// and dead_reason only for one that goes dead: never retry_in=0s for a
// dead job, nor an empty dead_reason for a retried one.
func TestHandlerFailureLogAttrs(t *testing.T) {
	t.Parallel()
	wr, c := newBareRun(Config{RetryBackoff: Backoff{Base: time.Minute, Max: time.Minute}})
	h := &handler{}
	boom := errors.New("boom")
	line := func(row db.HopperJob, err error) string {
		var buf bytes.Buffer
		log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		}}))
		log.Warn("job failed", failureAttrs(err, wr.completion(h, row, c, err), row)...)
		return buf.String()
	}
	require.Equal(t, "level=WARN msg=\"job failed\" error=boom retry_in=1m0s\n",
		line(db.HopperJob{ID: c.id, Attempt: 1, MaxAttempts: 3, Kind: "k"}, boom))
	require.Equal(t, "level=WARN msg=\"job failed\" error=boom dead_reason=\"out of attempts\"\n",
		line(db.HopperJob{ID: c.id, Attempt: 3, MaxAttempts: 3, Kind: "k"}, boom))
	require.Equal(t, "level=WARN msg=\"job failed\" error=\"permanent failure: boom\" dead_reason=\"permanent failure: boom\"\n",
		line(db.HopperJob{ID: c.id, Attempt: 1, MaxAttempts: 3, Kind: "k"}, Permanent(boom)))
}
