package worker

import (
	"context"
	"errors"
	"fmt"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/worker/detached"
	"github.com/hopperq/hopper/jobs"
)

// MaxPatchName is the longest a patch's name may be, in characters: the
// marker's name, prefix included, is at most MaxStepName.
const MaxPatchName = MaxStepName - len(PatchMarkerPrefix)

// Patched reports whether the job's run takes the patched path of a
// handler that changed while runs were in flight: true for a run that
// reaches this call for the first time (it records a marker here, so
// that its later runs replay true), false for a run that had already
// recorded another call at this place, before the patch was deployed
// (its later runs replay false, and take the old path whose records they
// hold).
//
//	if ok, err := worker.Patched(ctx, job, "charge-in-cents"); err != nil {
//		return err
//	} else if ok {
//		// the new path
//	} else {
//		// the old path, as the previous build ran it
//	}
//
// Retire a patch in two deploys once no run needs the old path
// (hopper.Client.GetPatchUse, `hopper patches`): first replace the call
// with DeprecatePatch and keep only the new path; then, once no live job
// holds the marker, remove DeprecatePatch. A worker of this version of
// Hopper that meets a marker its handler does not call Patched for (a
// run started by a newer build, picked up by an older one during a
// rolling deploy) gives the job back for UnknownPatchDelay, uncharged,
// for a newer worker to take. Under hoppertest.Work it returns true.
func Patched[T any](ctx context.Context, job *jobs.Job[T], name string) (bool, error) {
	if detached.From(ctx) != nil {
		return true, nil
	}
	c, err := patchJob(ctx, job.ID, "patched", name)
	if err != nil {
		return false, err
	}
	d := &c.durable
	d.mu.Lock()
	defer d.mu.Unlock()
	marker := PatchMarkerPrefix + name
	if err := d.afterSuspension(fmt.Sprintf("patched %q of job %d", name, job.ID)); err != nil {
		return false, err
	}
	for {
		rec, err := d.at(ctx, c)
		if err != nil {
			return false, err
		}
		if rec != nil {
			if rec.Kind == recordStep && rec.Name == marker {
				d.next++
				return true, nil
			}
			// Recorded before the patch: the old path, and the place is
			// the next call's.
			return false, nil
		}
		rctx, cancel := recordContext(ctx, c)
		err = d.record(rctx, c.held.q, c, db.RecordStepParams{Name: marker, Kind: recordStep, State: "done", Result: []byte("true")})
		cancel()
		if errors.Is(err, errRecordTaken) {
			if _, err := d.reload(ctx, c); err != nil {
				return false, err
			}
			continue
		}
		if err != nil {
			return false, err
		}
		d.next++
		return true, nil
	}
}

// DeprecatePatch is what Patched becomes once no run takes the old path:
// a run that recorded the patch's marker replays past it, and a new run
// records nothing. Remove it once no live job holds the marker
// (hopper.Client.GetPatchUse). Under hoppertest.Work it does nothing.
func DeprecatePatch[T any](ctx context.Context, job *jobs.Job[T], name string) error {
	if detached.From(ctx) != nil {
		return nil
	}
	c, err := patchJob(ctx, job.ID, "deprecate patch", name)
	if err != nil {
		return err
	}
	d := &c.durable
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.afterSuspension(fmt.Sprintf("deprecate patch %q of job %d", name, job.ID)); err != nil {
		return err
	}
	rec, err := d.at(ctx, c)
	if err != nil {
		return err
	}
	if rec != nil && rec.Kind == recordStep && rec.Name == PatchMarkerPrefix+name {
		d.next++
	}
	return nil
}

// patchJob returns the claim of the job the handler runs, checking the
// patch's name.
func patchJob(ctx context.Context, id int64, what, name string) (*heldJob, error) {
	if p := nameProblem(name); p != "" {
		return nil, invalidCall(what, id, p)
	}
	if n := len([]rune(name)); n > MaxPatchName {
		return nil, invalidCall(what, id, fmt.Sprintf("name %q: want at most %d characters for a patch", name, MaxPatchName))
	}
	return heldJobFrom(ctx, id)
}
