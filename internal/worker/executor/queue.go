package executor

import "sync"

// Queue runs a queue's claimed jobs on its handler goroutines, in the
// order they were claimed. Jobs wait in a queue; a goroutine that
// takes one first wakes another (the most recently idle, or a new one)
// when more are waiting, so a handler that blocks never holds up the jobs
// behind it, and a goroutine that finishes its job takes the next itself.
// Goroutines live until Run ends.
//
// At most one goroutine is being woken at a time. A claim of hundreds of
// short jobs is then run by the few goroutines that keep up with it,
// rather than by one goroutine per job: a channel read by every goroutine
// handed each job to the next in turn, so that every goroutine ran about
// one job between two garbage collections, grew back the stack the
// collector had shrunk (a fifth of the worker's CPU in copystack), and was
// one more stack for each collection to scan.
type Queue[T any] struct {
	execute func(T)         // the executor's
	wg      *sync.WaitGroup // counts the queue's goroutines (Executor.goroutines)
	runs    *sync.WaitGroup // counts the jobs dispatched not yet executed to the end (Executor.runs)

	mu      sync.Mutex
	waiting []T             // jobs dispatched, taken from head on
	head    int             // the oldest job no goroutine has taken yet
	idle    []chan struct{} // each parked goroutine's wake-up, the most recent last
	waking  bool            // a goroutine was woken or started and has not looked yet
	closed  bool
}

func newQueue[T any](execute func(T), wg, runs *sync.WaitGroup) *Queue[T] {
	return &Queue[T]{execute: execute, wg: wg, runs: runs}
}

// Dispatch queues t for a handler goroutine. It never blocks. Nothing is
// dispatched after the executor's Close.
func (q *Queue[T]) Dispatch(t T) {
	q.runs.Add(1)
	q.mu.Lock()
	q.waiting = append(q.waiting, t)
	q.wakeLocked()
	q.mu.Unlock()
}

// wakeLocked wakes a goroutine for the waiting jobs, unless none waits or
// one is on its way.
func (q *Queue[T]) wakeLocked() {
	if q.waking || q.head == len(q.waiting) {
		return
	}
	q.waking = true
	if n := len(q.idle); n > 0 {
		wake := q.idle[n-1]
		q.idle = q.idle[:n-1]
		wake <- struct{}{} // its buffer of one is empty while it is parked
		return
	}
	q.wg.Add(1)
	go q.loop()
}

// loop takes waiting jobs and runs them until the queue closes.
func (q *Queue[T]) loop() {
	defer q.wg.Done()
	wake := make(chan struct{}, 1)
	q.mu.Lock()
	q.waking = false // started to be the one woken
	for {
		if q.head < len(q.waiting) {
			d := q.waiting[q.head]
			var zero T
			q.waiting[q.head] = zero
			q.head++
			if q.head*2 >= len(q.waiting) {
				// Half taken or more: the rest moves to the front, so
				// the array is reused rather than grown while jobs keep
				// coming.
				n := copy(q.waiting, q.waiting[q.head:])
				clear(q.waiting[n:])
				q.waiting, q.head = q.waiting[:n], 0
			}
			q.wakeLocked() // the next job may not wait for this one
			q.mu.Unlock()
			q.execute(d)
			q.mu.Lock()
			continue
		}
		if q.closed {
			q.mu.Unlock()
			return
		}
		q.idle = append(q.idle, wake)
		q.mu.Unlock()
		if !parkWarm(wake) {
			return
		}
		q.mu.Lock()
		q.waking = false
	}
}

// close ends the queue's goroutines once the jobs already dispatched have been
// taken. Nothing is dispatched after it.
func (q *Queue[T]) close() {
	q.mu.Lock()
	q.closed = true
	idle := q.idle
	q.idle = nil
	q.mu.Unlock()
	for _, wake := range idle {
		close(wake)
	}
}

// warmStack is what an idle handler goroutine keeps of its stack: the
// garbage collector halves a parked goroutine's stack while it uses less
// than a quarter of it, so a frame of this size parked keeps it at four
// times as much, room for a job's run without growing it back.
const warmStack = 2 << 10

// parkWarm waits for a wake-up in a frame of warmStack bytes; false when
// the queue closed.
//
//go:noinline
func parkWarm(wake chan struct{}) bool {
	var room [warmStack]byte
	keepFrame(&room)
	_, ok := <-wake
	return ok
}

//go:noinline
func keepFrame(*[warmStack]byte) {}
