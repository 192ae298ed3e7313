package worker

import (
	"context"
	"time"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/worker/announce"
	"github.com/hopperq/hopper/internal/worker/commitfate"
)

// shutdownReserve is the part of the shutdown kept, at the end, for
// cancelling handlers still running, recording the last results and
// giving unfinished jobs back: a quarter of ShutdownTimeout, at most 5s.
func shutdownReserve(timeout time.Duration) time.Duration { return min(timeout/4, 5*time.Second) }

// shutdown waits for running handlers until the reserve begins, then gives
// their jobs back (their results will be discarded) and cancels them.
func (r *run) shutdown(hardDeadline time.Time) {
	reserve := shutdownReserve(r.w.cfg.ShutdownTimeout)
	if r.executor.WaitRuns(hardDeadline.Add(-reserve)) {
		return
	}
	released := r.held.releaseRunning()
	r.w.log.Warn("shutdown deadline near: cancelling running handlers", "jobs", len(released))
	// Handlers that honour their context return at once; wait a little for
	// them, keeping the rest of the reserve for recording results and
	// giving jobs back.
	if !r.executor.WaitRuns(time.Now().Add(reserve / 2)) {
		r.w.log.Error("handlers ignore cancellation; going on without them")
	}
}

// releaseUnfinished gives back every claim whose handler did not finish,
// and reports whether it could.
func (r *run) releaseUnfinished() bool {
	w := r.w
	r.held.releaseRunning()
	claims := r.held.takeReleased()
	if len(claims) == 0 {
		return true
	}
	ctx, cancel := context.WithTimeout(r.hard, statementTimeout(w.cfg.LeaseDuration))
	defer cancel()
	p := db.ReleaseParams{Ids: make([]int64, len(claims)), Attempts: make([]int32, len(claims))}
	for i, c := range claims {
		p.Ids[i], p.Attempts[i] = c.id, c.attempt
	}
	rows, err := w.q.Release(ctx, p)
	if commitfate.Unknown(err) && ctx.Err() == nil {
		// The give-back may have committed: sent again, it gives back
		// what is still running under these claims, and nothing twice
		// (Release is fenced by attempt and the running state).
		rows, err = w.q.Release(ctx, p)
	}
	if err != nil {
		w.log.Error("could not give back unfinished jobs; they run again once this worker is taken to be gone", "jobs", len(claims), "error", err)
		return false
	}
	var wk announce.Set
	for _, r := range rows {
		wk.Add(r.Queue, r.Priority, r.RunAt, r.ID)
	}
	w.announcer.Announce(ctx, &wk, "release")
	w.log.Info("gave back unfinished jobs", "jobs", len(rows))
	return true
}
