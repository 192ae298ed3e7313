// Package hopperotel traces Hopper's jobs with OpenTelemetry, through
// Hopper's hooks: the enqueue hook writes the caller's W3C trace context
// into the job's metadata, and the worker middleware starts a consumer
// span for each run that continues that trace on the first attempt and
// links to it from a trace of its own on retries (a retry hours later
// should not stretch the request's trace). MetricProducer exports the
// worker's Prometheus metrics through OpenTelemetry as well.
//
//	remove := jobs.UseEnqueue(hopperotel.EnqueueHook())   // every enqueue of the process
//	defer remove()
//	w, _ := worker.New(pool, worker.Config{
//		Middleware: []worker.Middleware{hopperotel.Middleware()},
//		Registerer: registry,
//	})
//	reader := metric.NewPeriodicReader(exporter, metric.WithProducer(hopperotel.MetricProducer(registry)))
//
// It is a module of its own, so that Hopper's core does not depend on
// OpenTelemetry. Without options it uses the global tracer provider and
// the W3C trace-context propagator.
package hopperotel

import (
	"context"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	otelprom "go.opentelemetry.io/contrib/bridges/prometheus"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/worker"
)

// ScopeName names the tracer.
const ScopeName = "github.com/hopperq/hopper/hopperotel"

// Attribute keys of a run's span, besides OpenTelemetry's messaging ones.
const (
	AttrJobID      = attribute.Key("hopper.job.id")
	AttrJobKind    = attribute.Key("hopper.job.kind")
	AttrJobAttempt = attribute.Key("hopper.job.attempt")
	AttrJobOutcome = attribute.Key("hopper.job.outcome")
)

// Option configures the hook and the middleware.
type Option func(*options)

type options struct {
	provider   trace.TracerProvider
	propagator propagation.TextMapPropagator
}

// TracerProvider sets the tracer provider (default: otel's global).
func TracerProvider(p trace.TracerProvider) Option {
	return func(o *options) { o.provider = p }
}

// Propagator sets how trace context is written to and read from a
// job's metadata (default: W3C trace context, traceparent and tracestate).
func Propagator(p propagation.TextMapPropagator) Option {
	return func(o *options) { o.propagator = p }
}

func resolve(opts []Option) options {
	o := options{propagator: propagation.TraceContext{}}
	for _, opt := range opts {
		opt(&o)
	}
	if o.provider == nil {
		o.provider = otel.GetTracerProvider()
	}
	return o
}

// EnqueueHook returns an enqueue hook that writes the trace context of
// the enqueue's context into the job's metadata. Register it for every
// kind with jobs.UseEnqueue, or for some with jobs.OnEnqueue.
func EnqueueHook(opts ...Option) jobs.EnqueueHook {
	o := resolve(opts)
	return func(ctx context.Context, e *jobs.Enqueueing) error {
		if trace.SpanContextFromContext(ctx).IsValid() {
			if e.Meta == nil {
				e.Meta = jobs.Meta{}
			}
			o.propagator.Inject(ctx, propagation.MapCarrier(e.Meta))
		}
		return nil
	}
}

// Middleware returns worker middleware that runs each job inside a
// consumer span named "process <kind>", with the job's id, kind, queue,
// attempt and outcome (worker.Judge's reading of the run's result); a run
// that failed records its error and an error status.
func Middleware(opts ...Option) worker.Middleware {
	o := resolve(opts)
	tracer := o.provider.Tracer(ScopeName)
	return func(ctx context.Context, job *jobs.Row, next func(context.Context) error) error {
		producer := trace.SpanContextFromContext(o.propagator.Extract(context.Background(), propagation.MapCarrier(job.Meta)))
		start := []trace.SpanStartOption{
			trace.WithSpanKind(trace.SpanKindConsumer),
			trace.WithAttributes(
				attribute.String("messaging.system", "hopper"),
				attribute.String("messaging.operation.type", "process"),
				attribute.String("messaging.destination.name", job.Queue),
				attribute.String("messaging.message.id", strconv.FormatInt(job.ID, 10)),
				AttrJobID.Int64(job.ID), AttrJobKind.String(job.Kind), AttrJobAttempt.Int(job.Attempt),
			),
		}
		switch {
		case producer.IsValid() && job.Attempt <= 1:
			ctx = trace.ContextWithRemoteSpanContext(ctx, producer) // the request's trace goes on
		case producer.IsValid():
			start = append(start, trace.WithNewRoot(), trace.WithLinks(trace.Link{SpanContext: producer}))
		}
		ctx, span := tracer.Start(ctx, "process "+job.Kind, start...)
		defer span.End()
		err := next(ctx)
		v := worker.Judge(err, job.Attempt, job.MaxAttempts)
		span.SetAttributes(AttrJobOutcome.String(string(v.Outcome)))
		if v.Outcome == worker.OutcomeFailed || v.Outcome == worker.OutcomeDead {
			span.RecordError(err)
			span.SetStatus(codes.Error, v.Message)
		}
		return err
	}
}

// MetricProducer exports the metrics gathered by g (the registry given to
// the worker as Config.Registerer) through OpenTelemetry: pass it to a
// reader with metric.WithProducer.
func MetricProducer(g prometheus.Gatherer) metric.Producer {
	return otelprom.NewMetricProducer(otelprom.WithGatherer(g))
}
