package jobs_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/worker"
)

// benchModes are the unique modes BenchmarkEnqueueUnique compares with a
// plain enqueue.
var benchModes = []struct {
	name string
	key  bool
	opts []jobs.EnqueueOption
}{
	{name: "plain"},
	{name: "live", key: true},
	{name: "states", key: true, opts: []jobs.EnqueueOption{jobs.UniqueStates(jobs.StateCompleted, jobs.StateDead, jobs.StateCancelled)}},
	{name: "period", key: true, opts: []jobs.EnqueueOption{jobs.UniquePeriod(time.Hour)}},
	{name: "replace", key: true, opts: []jobs.EnqueueOption{jobs.ReplaceWaiting()}},
	{name: "debounce", key: true, opts: []jobs.EnqueueOption{jobs.Debounce(time.Hour)}},
}

// BenchmarkEnqueueUnique is one enqueue per mode on a pool, per job:
// single with a new key each time (an insert), single with the same key
// (kept, or replaced), and a batch of 100 jobs with new keys (EnqueueMany;
// ns/job). The locked modes (states, period, replace, debounce) send the
// key's lock and the statement in one round trip; live and plain one
// statement.
func BenchmarkEnqueueUnique(b *testing.B) {
	tdb := testdb.New(b)
	ctx := context.Background()
	var n atomic.Int64
	for _, m := range benchModes {
		opts := func(key string) []jobs.EnqueueOption {
			if !m.key {
				return nil
			}
			return append([]jobs.EnqueueOption{jobs.UniqueKey(key)}, m.opts...)
		}
		b.Run(m.name+"/single-new", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := noteKind.Enqueue(ctx, tdb.Pool, Note{Text: "bench"}, opts(fmt.Sprint(n.Add(1)))...); err != nil {
					b.Fatal(err)
				}
			}
		})
		if m.key {
			b.Run(m.name+"/single-same", func(b *testing.B) {
				key := fmt.Sprint("same-", n.Add(1))
				b.ReportAllocs()
				for b.Loop() {
					if _, err := noteKind.Enqueue(ctx, tdb.Pool, Note{Text: "bench"}, opts(key)...); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
		b.Run(m.name+"/batch100", func(b *testing.B) {
			b.ReportAllocs()
			items := make([]jobs.Item[Note], 100)
			for b.Loop() {
				for i := range items {
					items[i] = jobs.Item[Note]{Payload: Note{Text: "bench"}, Options: opts(fmt.Sprint(n.Add(1)))}
				}
				if _, err := noteKind.EnqueueMany(ctx, tdb.Pool, items); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(items)), "ns/job")
		})
	}
}

type Storm struct {
	Key int `json:"key"`
	Seq int `json:"seq"`
}

// BenchmarkDebounceStorm enqueues 100,000 jobs over 1,000 keys in about
// ten seconds (or as fast as it can: unpaced), each with Debounce, while a
// worker runs them:
// four producers, each owning a quarter of the keys, send batches of 100
// (one per key of a slice of theirs, with that key's next sequence
// number). It prints how many jobs ran and how many enqueues were inserts
// and replaces, and fails if, once all is run, the last job of a key did
// not carry that key's last payload, or a key's jobs ran out of order.
// Run it alone, once:
//
//	go test -run '^$' -bench DebounceStorm -benchtime 1x ./jobs
func BenchmarkDebounceStorm(b *testing.B) {
	for _, c := range []struct {
		name     string
		debounce time.Duration
		spread   time.Duration
	}{
		{"debounce=500ms/over10s", 500 * time.Millisecond, 10 * time.Second},
		{"debounce=50ms/over10s", 50 * time.Millisecond, 10 * time.Second},
		{"debounce=500ms/unpaced", 500 * time.Millisecond, 0},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				b.Log(debounceStorm(b, stormSize{keys: 1000, total: 100_000, producers: 4, batch: 100}, c.debounce, c.spread))
			}
		})
	}
}

// TestDebounceWithWorker is the storm, small: 2,000 enqueues over 50 keys
// in about two seconds, with a debounce short enough that many jobs run
// during it, some enqueues meeting their job as it is claimed or runs.
// Every key's last run carries its last payload.
func TestDebounceWithWorker(t *testing.T) {
	t.Parallel()
	t.Log(debounceStorm(t, stormSize{keys: 50, total: 2000, producers: 2, batch: 25}, 20*time.Millisecond, 2*time.Second))
}

type stormSize struct{ keys, total, producers, batch int }

// debounceStorm runs one storm and says what happened; it fails b when a
// key's last run did not carry its last payload.
func debounceStorm(b testing.TB, size stormSize, debounce, spread time.Duration) string {
	keys, total, producers, batch := size.keys, size.total, size.producers, size.batch
	tdb := testdb.New(b)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg, err := pgxpool.ParseConfig(tdb.URL)
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns = 12
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	storm := jobs.MustDefine[Storm]("storm", jobs.UniqueFields("key"), jobs.Defaults(jobs.Debounce(debounce)))

	{
		var mu sync.Mutex
		ran := map[int][]int{} // per key, the sequence numbers run, in order
		runs := 0
		w, err := worker.New(pool, worker.Config{Queues: map[string]int{"default": 50}, PollInterval: 100 * time.Millisecond})
		if err != nil {
			b.Fatal(err)
		}
		if err := worker.Handle(w, storm, func(_ context.Context, job *jobs.Job[Storm]) error {
			mu.Lock()
			defer mu.Unlock()
			ran[job.Payload.Key] = append(ran[job.Payload.Key], job.Payload.Seq)
			runs++
			return nil
		}); err != nil {
			b.Fatal(err)
		}
		wctx, stopWorker := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- w.Run(wctx) }()

		var inserted, replaced, kept atomic.Int64
		last := make([]int, keys) // per key, its last sequence number enqueued
		began := time.Now()
		var wg sync.WaitGroup
		errs := make(chan error, producers)
		for p := range producers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				mine := keys / producers // keys p, p+producers, ...
				rounds := total / producers / batch
				seq := 0
				for r := range rounds {
					// Pace the producer to spread the storm over spread.
					if d := time.Until(began.Add(spread * time.Duration(r) / time.Duration(rounds))); spread > 0 && d > 0 {
						time.Sleep(d)
					}
					seq++
					items := make([]jobs.Item[Storm], batch)
					for i := range items {
						k := p + producers*((r*batch+i)%mine)
						items[i].Payload = Storm{Key: k, Seq: seq*batch + i}
						last[k] = seq*batch + i
					}
					res, err := storm.EnqueueMany(ctx, pool, items)
					if err != nil {
						errs <- err
						return
					}
					for _, x := range res.Results {
						switch x.Outcome() {
						case jobs.EnqueueInserted:
							inserted.Add(1)
						case jobs.EnqueueReplaced:
							replaced.Add(1)
						default:
							kept.Add(1)
						}
					}
				}
			}()
		}
		wg.Wait()
		enqueued := time.Since(began)
		close(errs)
		for err := range errs {
			b.Fatal(err)
		}
		// Wait for every job to have run: the last ones are due a debounce
		// after their last enqueue.
		testdb.WaitFor(b, "every storm job run", func() bool {
			var live int64
			if err := pool.QueryRow(ctx, "SELECT count(*) FROM hopper_jobs WHERE kind = 'storm'").Scan(&live); err != nil {
				b.Fatal(err)
			}
			return live == 0
		})
		drained := time.Since(began)
		stopWorker()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		for k := range keys {
			seqs := ran[k]
			if len(seqs) == 0 {
				b.Fatalf("key %d: no job ran", k)
			}
			if got := seqs[len(seqs)-1]; got != last[k] {
				b.Fatalf("key %d: the last job ran with payload %d, the last enqueued was %d", k, got, last[k])
			}
			for i := 1; i < len(seqs); i++ {
				if seqs[i] <= seqs[i-1] {
					b.Fatalf("key %d: payload %d ran after %d", k, seqs[i], seqs[i-1])
				}
			}
		}
		return fmt.Sprintf("debounce storm: %d enqueues over %d keys in %v (%.0f/s; %d inserted, %d replaced, %d kept), debounce %v; "+
			"%d jobs ran (%.1f per key), all done %v after the start; every key's last run carried its last payload",
			total, keys, enqueued.Round(time.Millisecond), float64(total)/enqueued.Seconds(), inserted.Load(), replaced.Load(), kept.Load(),
			debounce, runs, float64(runs)/float64(keys), drained.Round(time.Millisecond))
	}
}
