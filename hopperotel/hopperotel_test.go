package hopperotel_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/hopperq/hopper/hopperotel"
	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/worker"
)

func TestMain(m *testing.M) { testdb.Main(m) }

type Email struct {
	To string `json:"to"`
}

func attr(s sdktrace.ReadOnlySpan, key attribute.Key) attribute.Value {
	for _, kv := range s.Attributes() {
		if kv.Key == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

// TestTraceFollowsTheRequest: one enqueue in a traced request gives one
// job span in the request's trace, as its child; a retry gets a trace of
// its own, linked to the request's span. The worker's metrics come out of
// an OpenTelemetry reader too.
func TestTraceFollowsTheRequest(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pool := testdb.New(t).Pool
	exporter := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exporter))
	defer tp.Shutdown(ctx) //nolint:errcheck // the test's end

	kind := jobs.MustDefine[Email]("traced_email", jobs.OnEnqueue(hopperotel.EnqueueHook(hopperotel.TracerProvider(tp))))
	reqCtx, request := tp.Tracer("app").Start(ctx, "POST /signup")
	once, err := kind.Enqueue(reqCtx, pool, Email{To: "once"})
	require.NoError(t, err)
	twice, err := kind.Enqueue(reqCtx, pool, Email{To: "twice"})
	require.NoError(t, err)
	request.End()

	registry := prometheus.NewRegistry()
	var settled atomic.Int32
	w, err := worker.New(pool, worker.Config{
		PollInterval: 20 * time.Millisecond,
		RetryBackoff: worker.Backoff{Base: time.Millisecond, Max: time.Millisecond},
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
		Registerer:   registry,
		Middleware:   []worker.Middleware{hopperotel.Middleware(hopperotel.TracerProvider(tp))},
		OnOutcome: []worker.OutcomeHook{func(_ *jobs.Row, o worker.Outcome, _ error) {
			if o == worker.OutcomeDone {
				settled.Add(1)
			}
		}},
	})
	require.NoError(t, err)
	require.NoError(t, worker.Handle(w, kind, func(ctx context.Context, job *jobs.Job[Email]) error {
		if job.Payload.To == "twice" && job.Attempt == 1 {
			return errors.New("first try fails")
		}
		return nil
	}))
	wctx, stop := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- w.Run(wctx) }()
	testdb.WaitFor(t, "both jobs done", func() bool { return settled.Load() == 2 })
	stop()
	require.NoError(t, <-errc)

	reqSpan := request.SpanContext()
	byJob := map[int64][]sdktrace.ReadOnlySpan{}
	for _, s := range exporter.GetSpans().Snapshots() {
		if s.Name() == "process traced_email" {
			id := attr(s, hopperotel.AttrJobID).AsInt64()
			byJob[id] = append(byJob[id], s)
		}
	}
	require.Len(t, byJob[once.ID], 1, "one span per run")
	first := byJob[once.ID][0]
	require.Equal(t, reqSpan.TraceID(), first.SpanContext().TraceID(), "the job's span is in the request's trace")
	require.Equal(t, reqSpan.SpanID(), first.Parent().SpanID())
	require.Equal(t, trace.SpanKindConsumer, first.SpanKind())
	require.Equal(t, "done", attr(first, hopperotel.AttrJobOutcome).AsString())
	require.Equal(t, "default", attr(first, "messaging.destination.name").AsString())
	require.EqualValues(t, 1, attr(first, hopperotel.AttrJobAttempt).AsInt64())

	require.Len(t, byJob[twice.ID], 2)
	failed, retried := byJob[twice.ID][0], byJob[twice.ID][1]
	require.Equal(t, reqSpan.TraceID(), failed.SpanContext().TraceID())
	require.Equal(t, codes.Error, failed.Status().Code)
	require.Equal(t, "failed", attr(failed, hopperotel.AttrJobOutcome).AsString())
	require.NotEqual(t, reqSpan.TraceID(), retried.SpanContext().TraceID(), "a retry starts a trace of its own")
	require.Len(t, retried.Links(), 1)
	require.Equal(t, reqSpan.SpanID(), retried.Links()[0].SpanContext.SpanID(), "linked to the request")
	require.Equal(t, "done", attr(retried, hopperotel.AttrJobOutcome).AsString())

	// The worker's Prometheus metrics, read through OpenTelemetry.
	reader := sdkmetric.NewManualReader(sdkmetric.WithProducer(hopperotel.MetricProducer(registry)))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(ctx) //nolint:errcheck // the test's end
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(ctx, &rm))
	var completed float64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "hopper_job_outcomes_total" && m.Name != "hopper_job_outcomes" {
				continue
			}
			sum, ok := m.Data.(metricdata.Sum[float64])
			require.True(t, ok, "%T", m.Data)
			for _, dp := range sum.DataPoints {
				if o, _ := dp.Attributes.Value("outcome"); o.AsString() == "done" {
					completed += dp.Value
				}
			}
		}
	}
	require.EqualValues(t, 2, completed)
}

// TestUntracedEnqueue: without a span in the enqueue's context, no trace
// context is written, and the run starts a trace of its own.
func TestUntracedEnqueue(t *testing.T) {
	meta := jobs.Meta{}
	hook := hopperotel.EnqueueHook()
	require.NoError(t, hook(context.Background(), &jobs.Enqueueing{Meta: meta}))
	require.Empty(t, meta)
}

// TestWorkflowStepsShareATrace: a workflow enqueued in a traced request
// runs each of its steps in the request's trace, and a step a handler
// adds from its own transaction runs as a child of that handler's span.
func TestWorkflowStepsShareATrace(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pool := testdb.New(t).Pool
	exporter := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exporter))
	defer tp.Shutdown(ctx) //nolint:errcheck // the test's end

	kind := jobs.MustDefine[Email]("traced_step", jobs.OnEnqueue(hopperotel.EnqueueHook(hopperotel.TracerProvider(tp))))
	reqCtx, request := tp.Tracer("app").Start(ctx, "POST /orders")
	wf, err := jobs.EnqueueWorkflow(reqCtx, pool, jobs.NewWorkflow("traced").
		Add("a", kind.Entry(Email{To: "a"})).
		Add("b", kind.Entry(Email{To: "b"}), jobs.After("a")).
		Add("c", kind.Entry(Email{To: "c"}), jobs.After("a")).
		Add("d", kind.Entry(Email{To: "d"}), jobs.After("b", "c")))
	require.NoError(t, err)
	request.End()

	var settled atomic.Int32
	var added atomic.Int64
	w, err := worker.New(pool, worker.Config{
		PollInterval: 20 * time.Millisecond,
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
		Middleware:   []worker.Middleware{hopperotel.Middleware(hopperotel.TracerProvider(tp))},
		OnOutcome: []worker.OutcomeHook{func(_ *jobs.Row, o worker.Outcome, _ error) {
			if o == worker.OutcomeDone {
				settled.Add(1)
			}
		}},
	})
	require.NoError(t, err)
	require.NoError(t, worker.Handle(w, kind, func(ctx context.Context, job *jobs.Job[Email]) error {
		if job.Payload.To != "a" {
			return nil
		}
		tx, err := pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
		more, err := jobs.EnqueueWorkflow(ctx, tx, jobs.NewWorkflow(job.Workflow()).
			Add("found", kind.Entry(Email{To: "found"}), jobs.AfterJobs(job.ID)))
		if err != nil {
			return err
		}
		added.Store(more.Steps["found"])
		if err := worker.AckTx(ctx, tx, job); err != nil {
			return err
		}
		return tx.Commit(ctx)
	}))
	wctx, stop := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- w.Run(wctx) }()
	testdb.WaitFor(t, "every step done", func() bool { return settled.Load() == 5 })
	stop()
	require.NoError(t, <-errc)

	spans := map[int64]sdktrace.ReadOnlySpan{}
	for _, s := range exporter.GetSpans().Snapshots() {
		if s.Name() == "process traced_step" {
			spans[attr(s, hopperotel.AttrJobID).AsInt64()] = s
		}
	}
	require.Len(t, spans, 5)
	for step, id := range wf.Steps {
		require.Equal(t, request.SpanContext().TraceID(), spans[id].SpanContext().TraceID(), "step %s is in the request's trace", step)
		require.Equal(t, request.SpanContext().SpanID(), spans[id].Parent().SpanID(), "step %s", step)
	}
	found := spans[added.Load()]
	require.Equal(t, request.SpanContext().TraceID(), found.SpanContext().TraceID())
	require.Equal(t, spans[wf.Steps["a"]].SpanContext().SpanID(), found.Parent().SpanID(), "the added step is a child of the step that added it")
}
