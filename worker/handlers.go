package worker

import (
	"fmt"
	"sort"
	"time"

	"github.com/hopperq/hopper/jobs"
)

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
