package bench

import (
	"context"
	"errors"
	"time"

	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/worker"
)

// The soak's kinds on the worker process's side.

// failing is a job that fails for good on its first run: the soak's dead
// jobs.
var failing = jobs.MustDefine[benchJob]("bench.fail")

// tick is the job the soak's schedule fires every second, into tickQueue.
var tick = jobs.MustDefine[benchJob]("bench.tick")

// tickQueue holds the schedule's jobs apart, kept a day once completed, so
// that the soak can count every one fired.
const tickQueue = "bench-ticks"

// diamondSteps is the steps of one diamond workflow (diamond).
const diamondSteps = 5

var errFailsOnPurpose = errors.New("fails on purpose")

// handleSoak registers the soak's kinds on w, and with ticks its schedule:
// every worker instance defines it, and each slot still fires once.
func handleSoak(w *worker.Worker, ticks bool) error {
	if err := worker.Handle(w, failing, func(context.Context, *jobs.Job[benchJob]) error {
		return worker.Permanent(errFailsOnPurpose)
	}); err != nil {
		return err
	}
	if err := worker.Handle(w, tick, func(context.Context, *jobs.Job[benchJob]) error { return nil }); err != nil {
		return err
	}
	if !ticks {
		return nil
	}
	return worker.Schedule(w, "bench-soak-tick", tick, "@every 1s", func(time.Time) benchJob { return benchJob{} },
		worker.EnqueueOptions(jobs.Queue(tickQueue)))
}
