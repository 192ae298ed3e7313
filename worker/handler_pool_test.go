package worker

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// poolBed is a handler pool whose jobs run until the test lets them go.
type poolBed struct {
	hp      *handlerPool
	wg      sync.WaitGroup
	started chan int64    // a job's id as its handler starts
	release chan struct{} // each receive lets one blocked job return
	running atomic.Int64
}

func newPoolBed() *poolBed {
	b := &poolBed{started: make(chan int64, 100), release: make(chan struct{})}
	b.hp = newHandlerPool(func(d dispatched) {
		b.running.Add(1)
		defer b.running.Add(-1)
		b.started <- d.row.ID
		<-b.release
	}, &b.wg)
	return b
}

func (b *poolBed) job(id int64) dispatched {
	d := dispatched{}
	d.row.ID = id
	return d
}

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

func TestHandlerPoolStartsEveryJobBehindBlockedOnes(t *testing.T) {
	t.Parallel()
	b := newPoolBed()
	for id := range int64(5) {
		b.hp.dispatch(b.job(id))
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

func TestHandlerPoolReusesIdleGoroutines(t *testing.T) {
	t.Parallel()
	b := newPoolBed()
	b.hp.dispatch(b.job(1))
	b.hp.dispatch(b.job(2))
	<-b.started
	<-b.started
	b.release <- struct{}{}
	b.release <- struct{}{}
	b.waitIdle(t, 2)

	// Jobs run one after another reuse the idle goroutines: the pool
	// grows only when no goroutine is parked.
	for id := range int64(20) {
		b.hp.dispatch(b.job(id))
		require.Equal(t, id, <-b.started)
		require.Equal(t, 1, b.idle(), "the other stays parked")
		b.release <- struct{}{}
		b.waitIdle(t, 2)
	}

	// Close ends the parked goroutines, and a busy one once its job and
	// the jobs still waiting have run.
	b.hp.dispatch(b.job(100))
	b.hp.dispatch(b.job(101))
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
func TestHandlerPoolRunsEveryJobOnce(t *testing.T) {
	t.Parallel()
	var wg sync.WaitGroup
	var ran sync.Map
	var count atomic.Int64
	block := make(chan struct{})
	hp := newHandlerPool(func(d dispatched) {
		if d.row.ID%97 == 0 {
			<-block // a few handlers hold their goroutine until the end
		}
		_, dup := ran.LoadOrStore(d.row.ID, true)
		if dup {
			panic("a job ran twice")
		}
		count.Add(1)
	}, &wg)
	var senders sync.WaitGroup
	for s := range int64(4) {
		senders.Add(1)
		go func() {
			defer senders.Done()
			for i := range int64(5000) {
				d := dispatched{}
				d.row.ID = s*5000 + i + 1
				hp.dispatch(d)
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
	require.EqualValues(t, 20000, count.Load())
}
