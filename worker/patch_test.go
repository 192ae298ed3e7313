package worker_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/hoppertest"
	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/worker"
)

// patchBuilds is a durable handler in two builds of an application: the
// old one charges in one step ("charge"), the new one in another
// ("charge-cents") behind worker.Patched. Both sleep first (job 1 for an
// hour, the others a millisecond), await the event "go-N" after the
// charge, and record a last step, "receipt", which blocks while block is
// set for the job (a run stopped half-way through its steps). Each run
// that ends says which path it took.
type patchBuilds struct {
	mu    sync.Mutex
	paths map[int64]string
	block map[int]bool
}

// The builds: the old one, the one with Patched, the one with
// DeprecatePatch and only the new path.
const (
	buildOld = iota
	buildPatched
	buildDeprecated
)

func (p *patchBuilds) handler(build int) func(context.Context, *jobs.Job[Task]) error {
	return func(ctx context.Context, j *jobs.Job[Task]) error {
		if _, err := worker.Step(ctx, j, "a", func(context.Context) (int, error) { return 1, nil }); err != nil {
			return err
		}
		nap := time.Millisecond
		if j.Payload.N == 1 {
			nap = time.Hour
		}
		if err := worker.Sleep(ctx, j, "nap", nap); err != nil {
			return err
		}
		path := "old"
		switch build {
		case buildPatched:
			ok, err := worker.Patched(ctx, j, "charge-cents")
			if err != nil {
				return err
			}
			if ok {
				path = "new"
			}
		case buildDeprecated:
			if err := worker.DeprecatePatch(ctx, j, "charge-cents"); err != nil {
				return err
			}
			path = "new"
		}
		step := map[string]string{"old": "charge", "new": "charge-cents"}[path]
		if _, err := worker.Step(ctx, j, step, func(context.Context) (string, error) { return path, nil }); err != nil {
			return err
		}
		if _, err := worker.AwaitEvent[int](ctx, j, fmt.Sprintf("go-%d", j.Payload.N), time.Hour); err != nil {
			return err
		}
		if _, err := worker.Step(ctx, j, "receipt", func(ctx context.Context) (int, error) {
			p.mu.Lock()
			blocked := p.block[j.Payload.N]
			p.mu.Unlock()
			if blocked {
				<-ctx.Done()
				return 0, ctx.Err()
			}
			return 1, nil
		}); err != nil {
			return err
		}
		p.mu.Lock()
		p.paths[j.ID] = path
		p.mu.Unlock()
		return nil
	}
}

func (p *patchBuilds) path(id int64) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.paths[id]
}

// TestPatchedAcrossDeploys: runs in flight when a durable handler's
// change is deployed behind worker.Patched. A run that had not reached
// the patch (sleeping before it) takes the new path; one that had
// recorded the old call (waiting for an event after it, or stopped
// half-way through its later steps) replays the old path to its end. A
// run the new build started, picked up by the old build during a rolling
// deploy, is given back uncharged (worker.ErrUnknownPatch), not failed,
// and the new build finishes it. GetPatchUse counts the runs that hold
// the marker and those that may still take the old path.
func TestPatchedAcrossDeploys(t *testing.T) {
	b := setup(t)
	k := kind(t, "patched_charge")
	client := hopper.NewClient(b.Pool)
	p := &patchBuilds{paths: map[int64]string{}, block: map[int]bool{3: true}}
	cfg := worker.Config{ShutdownTimeout: 200 * time.Millisecond}
	enqueue := func(n int) int64 {
		t.Helper()
		res, err := k.Enqueue(b.Ctx, b.Pool, Task{N: n})
		require.NoError(t, err)
		return res.ID
	}
	emit := func(n int) {
		t.Helper()
		_, err := client.EmitEvent(b.Ctx, fmt.Sprintf("go-%d", n), 1)
		require.NoError(t, err)
	}
	waiting := func(id int64, records int) func() bool {
		return func() bool { return b.jobState(t, id) == "scheduled" && b.records(t, id) == records }
	}

	// The old build: job 1 sleeps before the charge; job 2 charged and
	// awaits its event; job 3 charged, got its event and is stopped
	// half-way through its receipt.
	old := start(t, b, cfg, func(w *worker.Worker) { require.NoError(t, worker.Handle(w, k, p.handler(buildOld))) })
	sleeping, awaiting, halfway := enqueue(1), enqueue(2), enqueue(3)
	testdb.WaitFor(t, "job 1 sleeping", waiting(sleeping, 2))
	testdb.WaitFor(t, "job 2 awaiting its event", waiting(awaiting, 4))
	testdb.WaitFor(t, "job 3 awaiting its event", waiting(halfway, 4))
	emit(3)
	testdb.WaitFor(t, "job 3 in its receipt", func() bool { return b.jobState(t, halfway) == "running" && b.records(t, halfway) == 4 })
	old.stop()
	require.Equal(t, "pending", b.jobState(t, halfway), "given back at shutdown, half-way")
	use, err := client.GetPatchUse(b.Ctx, k.Name(), "charge-cents")
	require.NoError(t, err)
	require.Equal(t, hopper.PatchUse{Kind: k.Name(), Patch: "charge-cents", Marked: 0, Unmarked: 3}, use)

	// The new build.
	p.mu.Lock()
	p.block = map[int]bool{}
	p.mu.Unlock()
	patched := start(t, b, cfg, func(w *worker.Worker) { require.NoError(t, worker.Handle(w, k, p.handler(buildPatched))) })
	testdb.WaitFor(t, "job 3 ended", func() bool { return p.path(halfway) != "" })
	require.Equal(t, "old", p.path(halfway), "recorded the old charge: replays the old path")
	emit(2)
	testdb.WaitFor(t, "job 2 ended", func() bool { return p.path(awaiting) != "" })
	require.Equal(t, "old", p.path(awaiting), "recorded the old charge: replays the old path")
	_, err = client.WakeJob(b.Ctx, sleeping)
	require.NoError(t, err)
	testdb.WaitFor(t, "job 1 awaiting its event", waiting(sleeping, 5))
	emit(1)
	testdb.WaitFor(t, "job 1 ended", func() bool { return p.path(sleeping) != "" })
	require.Equal(t, "new", p.path(sleeping), "had not reached the patch: takes the new path")

	// A run the new build started, past the patch, awaiting its event.
	newer := enqueue(4)
	testdb.WaitFor(t, "job 4 awaiting its event", waiting(newer, 5))
	use, err = client.GetPatchUse(b.Ctx, k.Name(), "charge-cents")
	require.NoError(t, err)
	require.Equal(t, hopper.PatchUse{Kind: k.Name(), Patch: "charge-cents", Marked: 1, Unmarked: 0}, use)
	list, err := client.ListPatches(b.Ctx)
	require.NoError(t, err)
	require.Equal(t, []hopper.PatchUse{use}, list)
	patched.stop()

	// The old build takes it back during a rolling deploy: it gives it
	// back, uncharged; then the new build finishes it.
	var seen *outcomes
	rolledBack := start(t, b, cfg, func(w *worker.Worker) {
		seen = observe(w)
		require.NoError(t, worker.Handle(w, k, p.handler(buildOld)))
	})
	before := b.job(t, newer)
	emit(4)
	testdb.WaitFor(t, "job 4 given back", func() bool { return len(seen.of(newer, before.Attempt+1)) > 0 })
	require.Equal(t, []string{string(worker.OutcomeSnoozed)}, seen.of(newer, before.Attempt+1))
	after := b.job(t, newer)
	require.Equal(t, "scheduled", after.State, "given back, not failed")
	require.Equal(t, before.MaxAttempts-before.Attempt, after.MaxAttempts-after.Attempt, "uncharged")
	require.Empty(t, p.path(newer))
	rolledBack.stop()

	start(t, b, cfg, func(w *worker.Worker) { require.NoError(t, worker.Handle(w, k, p.handler(buildPatched))) })
	_, err = client.UpdateJob(b.Ctx, newer, hopper.JobUpdate{RunNow: true})
	require.NoError(t, err)
	testdb.WaitFor(t, "job 4 ended", func() bool { return p.path(newer) != "" && b.jobState(t, newer) == "gone" })
	require.Equal(t, "new", p.path(newer))
	list, err = client.ListPatches(b.Ctx)
	require.NoError(t, err)
	require.Empty(t, list, "no live job holds the marker: DeprecatePatch can go")
}

// TestDeprecatePatch: after the patch's old path is gone, a build with
// DeprecatePatch replays the marker of a run that recorded it and
// records none for a new run; the kit runs Patched's new path; and the
// marker's names are Patched's own.
func TestDeprecatePatch(t *testing.T) {
	b := setup(t)
	k := kind(t, "deprecated_charge")
	client := hopper.NewClient(b.Pool)
	p := &patchBuilds{paths: map[int64]string{}, block: map[int]bool{}}
	patched := start(t, b, worker.Config{}, func(w *worker.Worker) { require.NoError(t, worker.Handle(w, k, p.handler(buildPatched))) })
	res, err := k.Enqueue(b.Ctx, b.Pool, Task{N: 2})
	require.NoError(t, err)
	testdb.WaitFor(t, "the job awaiting its event past the patch", func() bool {
		return b.jobState(t, res.ID) == "scheduled" && b.records(t, res.ID) == 5
	})
	patched.stop()
	start(t, b, worker.Config{}, func(w *worker.Worker) { require.NoError(t, worker.Handle(w, k, p.handler(buildDeprecated))) })
	_, err = client.EmitEvent(b.Ctx, "go-2", 1)
	require.NoError(t, err)
	testdb.WaitFor(t, "the patched run ended", func() bool { return p.path(res.ID) == "new" })

	fresh, err := k.Enqueue(b.Ctx, b.Pool, Task{N: 5})
	require.NoError(t, err)
	testdb.WaitFor(t, "a new run awaiting its event", func() bool {
		return b.jobState(t, fresh.ID) == "scheduled" && b.records(t, fresh.ID) == 4
	})
	use, err := client.GetPatchUse(b.Ctx, k.Name(), "charge-cents")
	require.NoError(t, err)
	require.Equal(t, hopper.PatchUse{Kind: k.Name(), Patch: "charge-cents", Marked: 0, Unmarked: 1}, use, "no marker recorded")

	// The kit takes the new path.
	var kitPath bool
	r := hoppertest.Work(context.Background(), k, func(ctx context.Context, j *jobs.Job[Task]) error {
		var err error
		kitPath, err = worker.Patched(ctx, j, "charge-cents")
		return err
	}, Task{})
	require.NoError(t, r.Err)
	require.True(t, kitPath)

	// A step may not take a marker's name, nor a patch a name too long
	// for one: permanent, with the reason.
	bad := kind(t, "bad_patch_names")
	start(t, b, worker.Config{}, func(w *worker.Worker) {
		require.NoError(t, worker.Handle(w, bad, func(ctx context.Context, j *jobs.Job[Task]) error {
			if j.Payload.N == 1 {
				_, err := worker.Step(ctx, j, worker.PatchMarkerPrefix+"x", func(context.Context) (int, error) { return 1, nil })
				return err
			}
			_, err := worker.Patched(ctx, j, strings.Repeat("p", worker.MaxPatchName+1))
			return err
		}))
	})
	for n, says := range map[int]string{1: `names beginning "hopper.patch:" are Patched's`, 2: "characters for a patch"} {
		res, err := bad.Enqueue(b.Ctx, b.Pool, Task{N: n})
		require.NoError(t, err)
		var d db.HopperDeadJob
		testdb.WaitFor(t, "the job dead", func() bool { var ok bool; d, ok = b.dead(t, res.ID); return ok })
		require.Contains(t, d.Reason, says)
		require.Contains(t, d.Reason, worker.ErrInvalidDurableCall.Error())
	}
}
