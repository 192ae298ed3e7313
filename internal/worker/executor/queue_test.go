package executor

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// job is a task of the queue tests: its id.
type job struct{ id int64 }

// poolBed is a queue whose jobs run until the test lets them go.
type poolBed struct {
	hp      *Queue[job]
	wg      sync.WaitGroup
	runs    sync.WaitGroup
	started chan int64    // a job's id as its handler starts
	release chan struct{} // each receive lets one blocked job return
	running atomic.Int64
}

func newPoolBed() *poolBed {
	b := &poolBed{started: make(chan int64, 100), release: make(chan struct{})}
	b.hp = newQueue(func(d job) {
		defer b.runs.Done()
		b.running.Add(1)
		defer b.running.Add(-1)
		b.started <- d.id
		<-b.release
	}, &b.wg, &b.runs)
	return b
}

func (b *poolBed) job(id int64) job { return job{id} }

func (b *poolBed) idle() int {
	b.hp.mu.Lock()
	defer b.hp.mu.Unlock()
	return len(b.hp.idle)
}

func (b *poolBed) waitIdle(t *testing.T, n int) {
	t.Helper()
	for b.idle() != n {
		runtime.Gosched()
	}
}

func TestQueueStartsEveryJobBehindBlockedOnes(t *testing.T) {
	t.Parallel()
	b := newPoolBed()
	for id := range int64(5) {
		b.hp.Dispatch(b.job(id))
	}
	// Each job starts though every job before it blocks.
	got := map[int64]bool{}
	for range 5 {
		got[<-b.started] = true
	}
	require.Equal(t, map[int64]bool{0: true, 1: true, 2: true, 3: true, 4: true}, got)
	require.EqualValues(t, 5, b.running.Load())
	for range 5 {
		b.release <- struct{}{}
	}
	b.waitIdle(t, 5)
	b.hp.close()
	b.wg.Wait()
}

func TestQueueReusesIdleGoroutines(t *testing.T) {
	t.Parallel()
	b := newPoolBed()
	b.hp.Dispatch(b.job(1))
	b.hp.Dispatch(b.job(2))
	<-b.started
	<-b.started
	b.release <- struct{}{}
	b.release <- struct{}{}
	b.waitIdle(t, 2)

	// Jobs run one after another reuse the idle goroutines: the pool
	// grows only when no goroutine is parked.
	for id := range int64(20) {
		b.hp.Dispatch(b.job(id))
		require.Equal(t, id, <-b.started)
		require.Equal(t, 1, b.idle(), "the other stays parked")
		b.release <- struct{}{}
		b.waitIdle(t, 2)
	}

	// Close ends the parked goroutines, and a busy one once its job and
	// the jobs still waiting have run.
	b.hp.Dispatch(b.job(100))
	b.hp.Dispatch(b.job(101))
	require.EqualValues(t, 100, <-b.started)
	b.hp.close()
	require.EqualValues(t, 101, <-b.started)
	b.release <- struct{}{}
	b.release <- struct{}{}
	b.wg.Wait()
	require.Zero(t, b.idle())
}

// Many producers' worth of jobs from several goroutines, some blocking:
// every job runs exactly once and the pool ends.
func TestQueueRunsEveryJobOnce(t *testing.T) {
	t.Parallel()
	var wg, runs sync.WaitGroup
	var ran sync.Map
	var count atomic.Int64
	block := make(chan struct{})
	hp := newQueue(func(d job) {
		defer runs.Done()
		if d.id%97 == 0 {
			<-block // a few handlers hold their goroutine until the end
		}
		_, dup := ran.LoadOrStore(d.id, true)
		if dup {
			panic("a job ran twice")
		}
		count.Add(1)
	}, &wg, &runs)
	var senders sync.WaitGroup
	for s := range int64(4) {
		senders.Add(1)
		go func() {
			defer senders.Done()
			for i := range int64(5000) {
				hp.Dispatch(job{s*5000 + i + 1})
			}
		}()
	}
	senders.Wait()
	for count.Load() < 20000-20000/97 {
		runtime.Gosched()
	}
	close(block)
	hp.close()
	wg.Wait()
	runs.Wait()
	require.EqualValues(t, 20000, count.Load())
}
