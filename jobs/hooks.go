package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Enqueueing is one job about to be inserted, as enqueue hooks see it. A
// hook may change the options and the metadata; Kind, Version, Payload and
// DB are for reading.
type Enqueueing struct {
	Kind    string
	Version int
	Payload json.RawMessage
	// DB is what the job is inserted through: the caller's transaction,
	// when it enqueues in one.
	DB DBTX

	Queue       string
	Priority    int
	MaxAttempts int
	RunAt       time.Time     // zero: now
	Delay       time.Duration // from now
	UniqueKey   string        // "": none
	// ConcurrencyKey is the job's concurrency key ("": none), after KeyBy.
	ConcurrencyKey string
	// Meta is the job's metadata, a copy of its own: change it freely.
	Meta Meta
}

// EnqueueHook sees, and may change, every job before it is inserted, in
// the caller's context and transaction. An error refuses the enqueue (a
// batch's whole batch): it is returned wrapped, nothing is inserted.
type EnqueueHook func(ctx context.Context, e *Enqueueing) error

// Hooks registered with UseEnqueue, for every kind: a pointer to an
// immutable slice, so that the enqueue path reads it without a lock.
var (
	globalHooks   atomic.Pointer[[]registeredHook]
	globalHooksMu sync.Mutex
	lastHookID    uint64
)

type registeredHook struct {
	id   uint64
	hook EnqueueHook
}

// UseEnqueue registers hooks run before every enqueue of every kind, in
// the order registered, before the kind's own (OnEnqueue). It returns a
// function that unregisters them. With none registered, an enqueue does no
// extra work.
func UseEnqueue(hooks ...EnqueueHook) (remove func()) {
	for _, h := range hooks {
		if h == nil {
			panic("hopper: UseEnqueue: nil hook")
		}
	}
	globalHooksMu.Lock()
	defer globalHooksMu.Unlock()
	var next []registeredHook
	if p := globalHooks.Load(); p != nil {
		next = slices.Clone(*p)
	}
	first := lastHookID + 1
	for _, h := range hooks {
		lastHookID++
		next = append(next, registeredHook{id: lastHookID, hook: h})
	}
	last := lastHookID
	globalHooks.Store(&next)
	return func() {
		globalHooksMu.Lock()
		defer globalHooksMu.Unlock()
		kept := slices.DeleteFunc(slices.Clone(*globalHooks.Load()), func(r registeredHook) bool {
			return r.id >= first && r.id <= last
		})
		globalHooks.Store(&kept)
	}
}

// OnEnqueue registers hooks for this kind's enqueues, run after the
// global ones (UseEnqueue).
func OnEnqueue(hooks ...EnqueueHook) DefineOption {
	return func(d *definition) {
		for _, h := range hooks {
			if h == nil {
				d.errs = append(d.errs, errors.New("a nil enqueue hook"))
				return
			}
		}
		d.hooks = append(d.hooks, hooks...)
	}
}

// hooked reports whether an enqueue of a kind with these hooks of its own
// runs any hook.
func hooked(own []EnqueueHook) bool {
	p := globalHooks.Load()
	return len(own) > 0 || (p != nil && len(*p) > 0)
}

// runHooks lets the global hooks, then the kind's, see and change one job
// about to be inserted; o is updated and validated again. It does nothing
// (and allocates nothing) when no hook is registered.
func runHooks(ctx context.Context, dbtx DBTX, kind string, version int, raw json.RawMessage, own []EnqueueHook, o *enqueueOptions) error {
	if !hooked(own) {
		return nil
	}
	p := globalHooks.Load()
	e := Enqueueing{
		Kind: kind, Version: version, Payload: raw, DB: dbtx,
		Queue: o.queue, Priority: o.priority, MaxAttempts: o.maxAttempts, RunAt: o.runAt, Delay: o.delay,
		Meta: make(Meta, len(o.meta)),
	}
	for k, v := range o.meta {
		e.Meta[k] = v
	}
	if o.uniqueKey != nil {
		e.UniqueKey = *o.uniqueKey
	}
	if o.key != nil {
		e.ConcurrencyKey = *o.key
	}
	if p != nil {
		for _, r := range *p {
			if err := r.hook(ctx, &e); err != nil {
				return fmt.Errorf("enqueue hook: %w", err)
			}
		}
	}
	for _, h := range own {
		if err := h(ctx, &e); err != nil {
			return fmt.Errorf("enqueue hook: %w", err)
		}
	}
	o.queue, o.priority, o.maxAttempts, o.runAt, o.delay, o.meta = e.Queue, e.Priority, e.MaxAttempts, e.RunAt, e.Delay, e.Meta
	o.uniqueKey = nil
	if e.UniqueKey != "" {
		o.uniqueKey = &e.UniqueKey
	}
	o.key = nil
	if e.ConcurrencyKey != "" {
		o.key = &e.ConcurrencyKey
	}
	return o.validate()
}
