package jobs_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/internal/testbed/testfactory"
	"github.com/hopperq/hopper/jobs"
)

// uniqueMode is one way of holding a key, as the model reads it.
type uniqueMode struct {
	name     string
	opts     []jobs.EnqueueOption
	finished []string // finished states that hold the key
	period   bool     // only finished jobs enqueued within the hour
	replace  bool
}

var uniqueModes = []uniqueMode{
	{name: "live"},
	{name: "completed", opts: []jobs.EnqueueOption{jobs.UniqueStates(jobs.StateCompleted)}, finished: []string{"completed"}},
	{name: "dead+cancelled", opts: []jobs.EnqueueOption{jobs.UniqueStates(jobs.StateDead, jobs.StateCancelled)}, finished: []string{"dead", "cancelled"}},
	{name: "period", opts: []jobs.EnqueueOption{jobs.UniquePeriod(time.Hour)}, finished: []string{"completed", "dead", "cancelled"}, period: true},
	{name: "period completed", opts: []jobs.EnqueueOption{jobs.UniquePeriod(time.Hour), jobs.UniqueStates(jobs.StateCompleted)}, finished: []string{"completed"}, period: true},
	{name: "replace", opts: []jobs.EnqueueOption{jobs.ReplaceWaiting()}, replace: true},
	{name: "debounce", opts: []jobs.EnqueueOption{jobs.Debounce(time.Hour)}, replace: true},
	{name: "replace period", opts: []jobs.EnqueueOption{jobs.ReplaceWaiting(), jobs.UniquePeriod(time.Hour)}, finished: []string{"completed", "dead", "cancelled"}, period: true, replace: true},
}

// The model's view of one key's jobs.
type modelJob struct {
	id      int64
	state   string // pending (waiting), running, or a finished state
	old     bool   // enqueued two hours ago
	payload string
	keyless bool // gave its key up to a newer job while it ran
}

type uniqueModel map[string][]*modelJob // per key, oldest first

// enqueue is what the model expects of an enqueue, and applies it.
func (m uniqueModel) enqueue(key string, mode uniqueMode, payload string) (want jobs.EnqueueOutcome, holder *modelJob) {
	jobsOf := m.of(key)
	for _, j := range jobsOf {
		if j.state == "pending" || j.state == "running" {
			holder = j
		}
	}
	if holder == nil {
		for _, j := range jobsOf { // the newest finished one that counts
			counts := false
			for _, s := range mode.finished {
				counts = counts || s == j.state
			}
			if counts && !(mode.period && j.old) && (holder == nil || j.id > holder.id) {
				holder = j
			}
		}
	}
	switch {
	case holder == nil:
		return jobs.EnqueueInserted, nil
	case mode.replace && len(mode.finished) == 0 && holder.state == "running":
		holder.keyless = true // it runs on; the new job holds the key
		return jobs.EnqueueInserted, nil
	case mode.replace && holder.state == "pending":
		holder.payload = payload
		return jobs.EnqueueReplaced, holder
	default:
		return jobs.EnqueueKept, holder
	}
}

// of lists the jobs that hold key (live or finished), oldest first.
func (m uniqueModel) of(key string) []*modelJob {
	var out []*modelJob
	for _, j := range m[key] {
		if !j.keyless {
			out = append(out, j)
		}
	}
	return out
}

// A seeded sequence of enqueues in every mode, mixed with jobs claimed,
// finished and found from long ago, gives the model's answers on every
// path: one Enqueue at a time, EnqueueMany of the runs of enqueues (small
// batches), the same padded past 256 jobs (the size where a plain batch
// goes through COPY), and EnqueueBatch. HOPPER_UNIQUE_SEED repeats a run.
func TestUniqueProperty(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("HOPPER_UNIQUE_SEED"); s != "" {
		var err error
		seed, err = strconv.ParseUint(s, 10, 64)
		require.NoError(t, err)
	}
	t.Logf("seed %d: repeat with HOPPER_UNIQUE_SEED=%d go test ./jobs -run TestUniqueProperty", seed, seed)
	fmt.Fprintf(os.Stderr, "TestUniqueProperty: seed %d\n", seed)
	b := setup(t)
	kind := jobs.MustDefine[Note]("property")

	type op struct {
		what    string // enqueue, claim, finish, old
		key     string
		mode    uniqueMode
		payload string
		state   string // finish's and old's
	}
	rng := rand.New(rand.NewPCG(seed, seed^0x5eed))
	var ops []op
	for i := range 160 {
		o := op{key: fmt.Sprintf("k%d", rng.IntN(4))}
		switch r := rng.IntN(10); {
		case r < 6:
			o.what, o.mode, o.payload = "enqueue", uniqueModes[rng.IntN(len(uniqueModes))], fmt.Sprintf("p%d", i)
		case r < 7:
			o.what = "claim"
		case r < 9:
			o.what, o.state = "finish", []string{"completed", "dead", "cancelled"}[rng.IntN(3)]
		default:
			o.what, o.state = "old", []string{"completed", "dead", "cancelled"}[rng.IntN(3)]
		}
		ops = append(ops, o)
	}

	for _, path := range []string{"single", "many", "many past 256", "batch"} {
		model := uniqueModel{}
		key := func(k string) string { return path + "/" + k }
		var pending []op // enqueues not sent yet (batched paths)
		flush := func() {
			if len(pending) == 0 {
				return
			}
			items := make([]jobs.Item[Note], 0, len(pending))
			entries := make([]jobs.Entry, 0, len(pending))
			for _, o := range pending {
				opts := append([]jobs.EnqueueOption{jobs.UniqueKey(key(o.key))}, o.mode.opts...)
				items = append(items, jobs.Item[Note]{Payload: Note{Text: o.payload}, Options: opts})
				entries = append(entries, kind.Entry(Note{Text: o.payload}, opts...))
			}
			if path == "many past 256" {
				for range 257 {
					items = append(items, jobs.Item[Note]{Payload: Note{Text: "filler"}})
				}
			}
			var res jobs.BatchResult
			var err error
			if path == "batch" {
				res, err = jobs.EnqueueBatch(b.Ctx, b.Pool, entries)
			} else {
				res, err = kind.EnqueueMany(b.Ctx, b.Pool, items)
			}
			require.NoError(t, err, "seed %d, %s", seed, path)
			require.Len(t, res.Results, len(items))
			for i, o := range pending {
				check(t, seed, path, model, o.key, o.mode, o.payload, res.Results[i])
			}
			for _, r := range res.Results[len(pending):] {
				require.Equal(t, jobs.EnqueueInserted, r.Outcome())
			}
			pending = nil
		}
		for _, o := range ops {
			if o.what == "enqueue" {
				if path == "single" {
					opts := append([]jobs.EnqueueOption{jobs.UniqueKey(key(o.key))}, o.mode.opts...)
					res, err := kind.Enqueue(b.Ctx, b.Pool, Note{Text: o.payload}, opts...)
					require.NoError(t, err, "seed %d", seed)
					check(t, seed, path, model, o.key, o.mode, o.payload, res)
				} else {
					pending = append(pending, o)
				}
				continue
			}
			flush()
			var live *modelJob
			for _, j := range model.of(o.key) {
				if j.state == "pending" || j.state == "running" {
					live = j
				}
			}
			switch o.what {
			case "claim":
				if live != nil && live.state == "pending" {
					_, err := b.Pool.Exec(b.Ctx, `UPDATE hopper_jobs SET state = 'running', attempt = attempt + 1,
						lease_owner = 'property', lease_until = now() + interval '1 hour' WHERE id = $1`, live.id)
					require.NoError(t, err)
					live.state = "running"
				}
			case "finish":
				if live != nil {
					_, err := b.Pool.Exec(b.Ctx, moveSQL, []int64{live.id}, o.state, true)
					require.NoError(t, err)
					live.state = o.state
				}
			case "old":
				old := time.Now().Add(-2 * time.Hour)
				j := testfactory.Job(b.Ctx, t, b.Pool, &testfactory.JobOpts{State: o.state, Kind: kind.Name(), UniqueKey: key(o.key), CreatedAt: &old})
				model[o.key] = append(model[o.key], &modelJob{id: j.ID, state: o.state, old: true})
			}
		}
		flush()
		// The waiting and running jobs carry the payloads the model says.
		for k, js := range model {
			for _, j := range js {
				if j.state != "pending" && j.state != "running" {
					continue
				}
				var raw json.RawMessage
				require.NoError(t, b.Pool.QueryRow(b.Ctx, "SELECT payload FROM hopper_jobs WHERE id = $1", j.id).Scan(&raw))
				var n Note
				require.NoError(t, json.Unmarshal(raw, &n))
				require.Equal(t, j.payload, n.Text, "seed %d, %s: key %s", seed, path, k)
			}
		}
	}
}

// check compares an enqueue's answer with the model's, and records a new
// job in the model.
func check(t *testing.T, seed uint64, path string, model uniqueModel, key string, mode uniqueMode, payload string, got jobs.Result) {
	t.Helper()
	want, holder := model.enqueue(key, mode, payload)
	require.Equal(t, want, got.Outcome(), "seed %d, %s: key %s, mode %s", seed, path, key, mode.name)
	if want != jobs.EnqueueInserted {
		require.Equal(t, holder.id, got.ID, "seed %d, %s: key %s, mode %s", seed, path, key, mode.name)
		return
	}
	model[key] = append(model[key], &modelJob{id: got.ID, state: "pending", payload: payload})
}
