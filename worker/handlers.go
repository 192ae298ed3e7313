package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/jobs"
)

// The kinds registered with the worker: each one's handler, with its type
// erased, and the options it was registered with (HandleOption; the
// options themselves are given in handle.go, middleware.go and
// shared_limit.go), and the table the claims read them from.

// HandleOption configures how one kind is run.
type HandleOption func(*handleOptions)

type handleOptions struct {
	timeout    time.Duration
	jobTimeout func(job any) (time.Duration, bool)
	backoff    Backoff
	keep       time.Duration
	middleware []Middleware
	keyLimit   int
	shared     sharedLimit
}

// handler is a registered kind with its type erased: prepare decodes a
// claimed row (in the claiming goroutine) and returns the call that runs
// the typed handler on it (in a handler goroutine) and the run's timeout
// (0: the worker's Config.Timeout; negative: none). The call returns the
// handler's result as JSON when keep is positive (the job's completion is
// kept in the history), nil otherwise.
type handler struct {
	kind       string
	maxVersion int
	backoff    Backoff
	keep       time.Duration // the kind's KeepHistory; 0: its queue's
	middleware []Middleware  // Use's, inside the worker's
	keyLimit   int           // KeyLimit's; 0: the queue's
	shared     sharedLimit   // SharedLimit's; zero: none
	keyring    *jobs.Keyring // the kind's (jobs.Encrypted); nil: in the clear
	prepare    func(row db.HopperJob, keep time.Duration) (call func(ctx context.Context) (json.RawMessage, error), timeout time.Duration, err error)
}

// keepFor is how long a completed job of this kind in queue is kept: the
// kind's KeepHistory, else the queue's.
func (h *handler) keepFor(cfg *Config, queue string) time.Duration {
	if h.keep != 0 {
		return max(h.keep, 0)
	}
	return cfg.KeepHistoryByQueue[queue]
}

// workflowStepKey is the key that names a workflow step's workflow in its
// stored metadata. Searching the JSON's text for it is cheap, and a false
// match (the text inside some value) only keeps a job longer.
var workflowStepKey = []byte(`"` + jobs.MetaWorkflow + `"`)

// keepRow is keepFor for one claimed row: a workflow's step is kept at
// least KeepWorkflowSteps, for its children and for ListWorkflow.
func (h *handler) keepRow(cfg *Config, row db.HopperJob) time.Duration {
	keep := h.keepFor(cfg, row.Queue)
	if cfg.KeepWorkflowSteps > 0 && bytes.Contains(row.Meta, workflowStepKey) {
		keep = max(keep, cfg.KeepWorkflowSteps)
	}
	return keep
}

// MaxSharedLimit bounds a SharedLimit's most running jobs.
const MaxSharedLimit = 1_000_000

// sharedLimit is a kind's SharedLimit (shared_limit.go): its name, and
// the most running jobs of every kind of the name.
type sharedLimit struct {
	name string
	max  int
}

func (s sharedLimit) validate() error {
	if s == (sharedLimit{}) {
		return nil
	}
	if s.name == "" || len(s.name) > 255 {
		return fmt.Errorf("shared limit name %q is not 1 to 255 bytes", s.name)
	}
	if s.max < 1 || s.max > MaxSharedLimit {
		return fmt.Errorf("shared limit %q of %d jobs is outside 1 to %d", s.name, s.max, MaxSharedLimit)
	}
	return nil
}

// handlerTable is the handlers registered with the worker, by kind, and
// the same as the claim statements take them: kinds sorted, with each
// kind's newest version and key limit in parallel slices.
//
// Invariant: it is filled before Run (the Worker refuses Handle once it
// runs) and only read from then on, so its readers need no lock.
type handlerTable struct {
	byKind    map[string]*handler
	kinds     []string // parallel to versions, keyLimits, sharedNames and sharedMax, as Dequeue takes them
	versions  []int32
	keyLimits []int32
	// the kinds' shared limits (SharedLimit): the name ('' none) and the
	// most running jobs
	sharedNames []string
	sharedMax   []int32
}

func newHandlerTable() *handlerTable {
	return &handlerTable{byKind: map[string]*handler{}}
}

// add registers h, refusing a second handler for its kind.
func (t *handlerTable) add(h *handler) error {
	if t.byKind[h.kind] != nil {
		return fmt.Errorf("handle %s: %w", h.kind, jobs.ErrDuplicateKind)
	}
	for _, o := range t.byKind {
		if h.shared.name != "" && o.shared.name == h.shared.name && o.shared.max != h.shared.max {
			return fmt.Errorf("handle %s: %w: shared limit %q is %d for %s, not %d", h.kind, ErrInvalidConfig,
				h.shared.name, o.shared.max, o.kind, h.shared.max)
		}
	}
	t.byKind[h.kind] = h
	t.kinds, t.versions, t.keyLimits = t.kinds[:0], t.versions[:0], t.keyLimits[:0]
	t.sharedNames, t.sharedMax = t.sharedNames[:0], t.sharedMax[:0]
	names := make([]string, 0, len(t.byKind))
	for name := range t.byKind {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		t.kinds = append(t.kinds, name)
		t.versions = append(t.versions, int32(t.byKind[name].maxVersion))
		t.keyLimits = append(t.keyLimits, int32(t.byKind[name].keyLimit))
		t.sharedNames = append(t.sharedNames, t.byKind[name].shared.name)
		t.sharedMax = append(t.sharedMax, int32(t.byKind[name].shared.max))
	}
	return nil
}

// longestKeep is the longest a completed job this worker acknowledges is
// kept: a kind's KeepHistory, a queue's KeepHistoryByQueue, or
// KeepWorkflowSteps for a workflow's step. 0: it keeps none.
func (t *handlerTable) longestKeep(cfg *Config) time.Duration {
	keep := max(cfg.KeepWorkflowSteps, 0)
	for _, d := range cfg.KeepHistoryByQueue {
		keep = max(keep, d)
	}
	for _, h := range t.byKind {
		keep = max(keep, h.keep)
	}
	return keep
}

// of is the handler of kind, nil when none is registered.
func (t *handlerTable) of(kind string) *handler { return t.byKind[kind] }

// empty reports whether no handler is registered: the worker then only
// fires schedules.
func (t *handlerTable) empty() bool { return len(t.byKind) == 0 }

// kindKeyLimits reports whether any kind sets its own key limit, or runs
// under a shared limit: then every queue is claimed under flow control.
func (t *handlerTable) kindKeyLimits() bool {
	for i, n := range t.keyLimits {
		if n > 0 || t.sharedNames[i] != "" {
			return true
		}
	}
	return false
}
