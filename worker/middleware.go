package worker

import (
	"context"
	"encoding/json"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/rows"
	"github.com/hopperq/hopper/jobs"
)

// Use adds middleware of this kind's own, inside the worker's
// (Config.Middleware), the first outermost.
func Use(mw ...Middleware) HandleOption {
	return func(o *handleOptions) { o.middleware = append(o.middleware, mw...) }
}

// hooked reports whether runs of h need the job's view: a middleware or a
// hook would see it.
func (r *run) hooked(h *handler) bool {
	cfg := &r.w.cfg
	return len(cfg.Middleware) > 0 || len(h.middleware) > 0 || len(cfg.OnOutcome) > 0 || len(cfg.OnError) > 0
}

// view is the job as middleware and hooks see it.
func view(row db.HopperJob) *jobs.Row {
	r, _ := rows.Live(row) // a malformed history or metadata leaves those empty
	return &r
}

// wrap puts the worker's and the kind's middleware around call.
func (r *run) wrap(h *handler, job *jobs.Row, call func(context.Context) error) func(context.Context) error {
	mws := h.middleware
	if all := r.w.cfg.Middleware; len(all) > 0 {
		mws = append(append(make([]Middleware, 0, len(all)+len(h.middleware)), all...), h.middleware...)
	}
	for i := len(mws) - 1; i >= 0; i-- {
		mw, next := mws[i], call
		call = func(ctx context.Context) (err error) {
			defer func() {
				if p := recover(); p != nil {
					err = recovered(p)
				}
			}()
			return mw(ctx, job, next)
		}
	}
	return call
}

// callHooked runs a job whose runs middleware or hooks see: through the
// middleware, when there is any. Kept out of call, so that a worker without
// hooks pays nothing for them.
func (r *run) callHooked(ctx context.Context, d dispatched) (json.RawMessage, error) {
	if len(r.w.cfg.Middleware) == 0 && len(d.h.middleware) == 0 {
		return d.call(ctx)
	}
	var out json.RawMessage
	err := r.wrap(d.h, d.job.view, func(ctx context.Context) error {
		res, err := d.call(ctx)
		out = res
		return err
	})(ctx)
	if err != nil {
		return nil, err
	}
	return out, nil
}

// tellError calls the error hooks.
func (r *run) tellError(ctx context.Context, job *jobs.Row, err error) {
	for _, h := range r.w.cfg.OnError {
		r.safely("error", job, func() { h(ctx, job, err) })
	}
}

// safely runs a hook; a panic in it is logged, never the worker's end.
func (r *run) safely(what string, job *jobs.Row, hook func()) {
	defer func() {
		if p := recover(); p != nil {
			r.w.log.Error("a "+what+" hook panicked", "job_id", job.ID, "kind", job.Kind, "panic", p)
		}
	}()
	hook()
}

// told calls the outcome hooks for a run that had a view.
func (r *run) told(c *heldJob, o Outcome) {
	if c.view == nil {
		return
	}
	for _, h := range r.w.cfg.OnOutcome {
		r.safely("outcome", c.view, func() { h(c.view, o, c.runErr) })
	}
}
