package worker

import "sync"

// handlerPool runs a queue's claimed jobs on its handler goroutines, in
// the order they were claimed. Jobs wait in a queue; a goroutine that
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
type handlerPool struct {
	execute func(dispatched) // the executor's
	wg      *sync.WaitGroup  // counts the pool's goroutines (executor.poolWG)

	mu      sync.Mutex
	waiting []dispatched    // jobs dispatched, taken from head on
	head    int             // the oldest job no goroutine has taken yet
	idle    []chan struct{} // each parked goroutine's wake-up, the most recent last
	waking  bool            // a goroutine was woken or started and has not looked yet
	closed  bool
}

func newHandlerPool(execute func(dispatched), wg *sync.WaitGroup) *handlerPool {
	return &handlerPool{execute: execute, wg: wg}
}

// dispatch queues d for a handler goroutine. It never blocks.
func (hp *handlerPool) dispatch(d dispatched) {
	hp.mu.Lock()
	hp.waiting = append(hp.waiting, d)
	hp.wakeLocked()
	hp.mu.Unlock()
}

// wakeLocked wakes a goroutine for the waiting jobs, unless none waits or
// one is on its way.
func (hp *handlerPool) wakeLocked() {
	if hp.waking || hp.head == len(hp.waiting) {
		return
	}
	hp.waking = true
	if n := len(hp.idle); n > 0 {
		wake := hp.idle[n-1]
		hp.idle = hp.idle[:n-1]
		wake <- struct{}{} // its buffer of one is empty while it is parked
		return
	}
	hp.wg.Add(1)
	go hp.loop()
}

// loop takes waiting jobs and runs them until the pool closes.
func (hp *handlerPool) loop() {
	defer hp.wg.Done()
	wake := make(chan struct{}, 1)
	hp.mu.Lock()
	hp.waking = false // started to be the one woken
	for {
		if hp.head < len(hp.waiting) {
			d := hp.waiting[hp.head]
			hp.waiting[hp.head] = dispatched{}
			hp.head++
			if hp.head*2 >= len(hp.waiting) {
				// Half taken or more: the rest moves to the front, so
				// the array is reused rather than grown while jobs keep
				// coming.
				n := copy(hp.waiting, hp.waiting[hp.head:])
				clear(hp.waiting[n:])
				hp.waiting, hp.head = hp.waiting[:n], 0
			}
			hp.wakeLocked() // the next job may not wait for this one
			hp.mu.Unlock()
			hp.execute(d)
			hp.mu.Lock()
			continue
		}
		if hp.closed {
			hp.mu.Unlock()
			return
		}
		hp.idle = append(hp.idle, wake)
		hp.mu.Unlock()
		if !parkWarm(wake) {
			return
		}
		hp.mu.Lock()
		hp.waking = false
	}
}

// close ends the goroutines once the jobs already dispatched have been
// taken. Nothing is dispatched after it.
func (hp *handlerPool) close() {
	hp.mu.Lock()
	hp.closed = true
	idle := hp.idle
	hp.idle = nil
	hp.mu.Unlock()
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
// the pool closed.
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
