package jobs

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode/utf8"
)

// Workflows: jobs that wait for other jobs. A step is an ordinary job of
// any kind whose metadata names its workflow (MetaWorkflow) and its step
// (MetaStep); a step with parents waits, outside the ready index, until
// they have all ended, and the transaction that ends the last one makes it
// ready (migration 14, see docs/workflows.md).

// The metadata keys a workflow step is stored under, for SQL of your own
// and for handlers that read Job.Meta.
const (
	// MetaWorkflow holds the workflow's id.
	MetaWorkflow = "hopper.workflow"
	// MetaStep holds the step's name.
	MetaStep = "hopper.step"
	// MetaWorkflowPolicy holds the step's policy, when it is not the
	// default.
	MetaWorkflowPolicy = "hopper.workflow_policy"
)

// Limits of a workflow, checked before anything is written.
const (
	// MaxWorkflowIDBytes bounds a workflow id, in bytes of UTF-8.
	MaxWorkflowIDBytes = 255
	// MaxStepNameBytes bounds a step's name, in bytes of UTF-8.
	MaxStepNameBytes = 255
	// MaxWorkflowSteps bounds the steps one EnqueueWorkflow call adds
	// (a batch of 100,000 jobs and its callback fits).
	MaxWorkflowSteps = 100_001
)

// WorkflowPolicy says what a step does when one of its parents ends dead
// or cancelled.
type WorkflowPolicy string

const (
	// WorkflowCancel (the default) cancels the step when its parents have
	// all ended and one of them failed: it goes to the dead table as
	// cancelled, with the reason naming the parent, and its own dependents
	// apply their policies in turn.
	WorkflowCancel WorkflowPolicy = "cancel"
	// WorkflowRun runs the step anyway once its parents have all ended,
	// whatever their end: a batch's callback.
	WorkflowRun WorkflowPolicy = "run"
	// WorkflowWait leaves the step waiting until an operator retries the
	// failed parent (hopper.Client's RetryWorkflow, or a retry of that
	// job); it runs once the retried parent succeeds.
	WorkflowWait WorkflowPolicy = "wait"
)

// Workflow is a set of steps to enqueue together, each a job of any kind,
// each naming the steps it runs after: chains, fan-out, fan-in, diamonds.
// Build it with NewWorkflow and Add, then enqueue it with EnqueueWorkflow,
// which checks it whole before it writes anything. A Workflow is not safe
// for concurrent use.
type Workflow struct {
	id    string
	steps []*workflowStep
	names map[string]int
	err   error // the first mistake of an Add, reported by EnqueueWorkflow
}

type workflowStep struct {
	name      string
	entry     Entry
	after     []string
	afterJobs []int64
	policy    WorkflowPolicy
}

// StepOption configures one step of a workflow.
type StepOption func(*workflowStep)

// After makes the step wait until the named steps of the same Workflow
// have ended.
func After(steps ...string) StepOption {
	return func(s *workflowStep) { s.after = append(s.after, steps...) }
}

// AfterJobs makes the step wait for steps already enqueued, by job id:
// steps of the same workflow, live or ended (dead, or completed and kept).
// A handler uses it to add steps to its own running workflow, after
// itself: AfterJobs(job.ID), enqueued in its transaction with AckTx.
func AfterJobs(ids ...int64) StepOption {
	return func(s *workflowStep) { s.afterJobs = append(s.afterJobs, ids...) }
}

// OnParentFailure sets what the step does when a parent ends dead or
// cancelled: WorkflowCancel (the default), WorkflowRun or WorkflowWait.
func OnParentFailure(p WorkflowPolicy) StepOption {
	return func(s *workflowStep) { s.policy = p }
}

// NewWorkflow starts a workflow with the given id, which names it to
// hopper.Client's ListWorkflow, CancelWorkflow and RetryWorkflow. An empty
// id gets a random one ("wf_" and 24 hex digits). Giving the id of a
// workflow already enqueued adds steps to it.
func NewWorkflow(id string) *Workflow {
	if id == "" {
		var b [12]byte
		_, _ = rand.Read(b[:]) // never fails (crypto/rand)
		id = "wf_" + hex.EncodeToString(b[:])
	}
	return &Workflow{id: id, names: map[string]int{}}
}

// NewBatch makes a workflow of independent jobs ("job-1", "job-2", … in
// the order given) and a callback step ("callback") that runs once, when
// all of them have ended, however they ended (WorkflowRun): "tell me when
// the 10,000 exports are done". The callback's handler reads how they
// ended with CountParents.
func NewBatch(id string, entries []Entry, callback Entry) *Workflow {
	w := NewWorkflow(id)
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = fmt.Sprintf("job-%d", i+1)
		w.Add(names[i], e)
	}
	w.Add("callback", callback, After(names...), OnParentFailure(WorkflowRun))
	return w
}

// ID is the workflow's id.
func (w *Workflow) ID() string { return w.id }

// Len is the number of steps added.
func (w *Workflow) Len() int { return len(w.steps) }

// Add adds a step: a job made by Kind.Entry, under a name unique in the
// workflow. A mistake (an empty or repeated name, an entry that is
// refused) is reported by EnqueueWorkflow, with the step's name. It
// returns w, so that calls chain.
func (w *Workflow) Add(step string, e Entry, opts ...StepOption) *Workflow {
	s := &workflowStep{name: step, entry: e}
	for _, opt := range opts {
		opt(s)
	}
	if w.err == nil {
		w.err = w.check(s)
	}
	w.names[step] = len(w.steps)
	w.steps = append(w.steps, s)
	return w
}

// check refuses a step on its own (its parents are checked once all are
// known).
func (w *Workflow) check(s *workflowStep) error {
	switch {
	case s.name == "":
		return fmt.Errorf("%w: step %d has an empty name", ErrInvalidWorkflow, len(w.steps)+1)
	case len(s.name) > MaxStepNameBytes:
		return fmt.Errorf("%w: step name %.40q… is %d bytes, over the limit of %d", ErrInvalidWorkflow, s.name, len(s.name), MaxStepNameBytes)
	case !utf8.ValidString(s.name) || containsNUL(s.name):
		return fmt.Errorf("%w: step name %q is not valid UTF-8 text", ErrInvalidWorkflow, s.name)
	case s.entry.kind == "":
		return fmt.Errorf("%w: step %q: an empty Entry (make entries with Kind.Entry)", ErrInvalidWorkflow, s.name)
	case s.entry.err != nil:
		return fmt.Errorf("step %q (%s): %w", s.name, s.entry.kind, s.entry.err)
	}
	if _, dup := w.names[s.name]; dup {
		return fmt.Errorf("%w: two steps are named %q", ErrInvalidWorkflow, s.name)
	}
	switch s.policy {
	case "", WorkflowCancel, WorkflowRun, WorkflowWait:
	default:
		return fmt.Errorf("%w: step %q: unknown policy %q (WorkflowCancel, WorkflowRun or WorkflowWait)", ErrInvalidWorkflow, s.name, s.policy)
	}
	for _, id := range s.afterJobs {
		if id <= 0 {
			return fmt.Errorf("%w: step %q: AfterJobs(%d): not a job id", ErrInvalidWorkflow, s.name, id)
		}
	}
	return nil
}

// order checks the workflow whole (its id, its size, every parent named,
// no cycle) and returns its steps with parents before children, in the
// order they were added otherwise.
func (w *Workflow) order() ([]int, error) {
	switch {
	case w.err != nil:
		return nil, w.err
	case len(w.id) > MaxWorkflowIDBytes:
		return nil, fmt.Errorf("%w: id %.40q… is %d bytes, over the limit of %d", ErrInvalidWorkflow, w.id, len(w.id), MaxWorkflowIDBytes)
	case !utf8.ValidString(w.id) || containsNUL(w.id):
		return nil, fmt.Errorf("%w: id %q is not valid UTF-8 text", ErrInvalidWorkflow, w.id)
	case len(w.steps) == 0:
		return nil, fmt.Errorf("%w: no steps", ErrInvalidWorkflow)
	case len(w.steps) > MaxWorkflowSteps:
		return nil, fmt.Errorf("%w: %d steps, over the limit of %d", ErrInvalidWorkflow, len(w.steps), MaxWorkflowSteps)
	}
	// Kahn's algorithm: a step is placed once all its parents are.
	waiting := make([]int, len(w.steps))
	children := make([][]int, len(w.steps))
	for i, s := range w.steps {
		for _, p := range s.after {
			j, ok := w.names[p]
			switch {
			case !ok:
				return nil, fmt.Errorf("%w: step %q runs after %q, which is no step of this workflow", ErrInvalidWorkflow, s.name, p)
			case j == i:
				return nil, fmt.Errorf("%w: step %q runs after itself", ErrInvalidWorkflow, s.name)
			}
			waiting[i]++
			children[j] = append(children[j], i)
		}
	}
	order := make([]int, 0, len(w.steps))
	for i := range w.steps {
		if waiting[i] == 0 {
			order = append(order, i)
		}
	}
	for k := 0; k < len(order); k++ {
		for _, c := range children[order[k]] {
			if waiting[c]--; waiting[c] == 0 {
				order = append(order, c)
			}
		}
	}
	if len(order) < len(w.steps) {
		return nil, fmt.Errorf("%w: a cycle among steps %s", ErrInvalidWorkflow, w.cycle(waiting))
	}
	return order, nil
}

// cycle names the steps of one cycle, among the steps Kahn's algorithm
// could not place (waiting > 0): walking back through unplaced parents
// from any of them must come round.
func (w *Workflow) cycle(waiting []int) string {
	at := slices.IndexFunc(waiting, func(n int) bool { return n > 0 })
	seen := map[int]int{}
	var path []int
	for {
		if k, ok := seen[at]; ok {
			names := make([]string, 0, len(path)-k+1)
			for _, i := range path[k:] {
				names = append(names, fmt.Sprintf("%q", w.steps[i].name))
			}
			slices.Reverse(names)
			return strings.Join(append(names, names[0]), " → ")
		}
		seen[at] = len(path)
		path = append(path, at)
		for _, p := range w.steps[at].after {
			if j := w.names[p]; waiting[j] > 0 {
				at = j
				break
			}
		}
	}
}

// stamp writes the step's workflow, name and policy into its metadata and
// marks it waiting when it has parents.
func (w *Workflow) stamp(s *workflowStep, o *enqueueOptions) error {
	switch {
	case o.uniqueKey != nil:
		return fmt.Errorf("%w: a step cannot have a unique key (its parents decide when it runs)", ErrInvalidWorkflow)
	case o.sequence != nil:
		return fmt.Errorf("%w: a step cannot be in a sequence (its parents decide when it runs)", ErrInvalidWorkflow)
	}
	meta := make(Meta, len(o.meta)+3)
	maps.Copy(meta, o.meta) // never write into a map the kind's defaults share
	meta[MetaWorkflow], meta[MetaStep] = w.id, s.name
	delete(meta, MetaWorkflowPolicy)
	if s.policy != "" && s.policy != WorkflowCancel {
		meta[MetaWorkflowPolicy] = string(s.policy)
	}
	raw, err := meta.encode()
	if err != nil {
		return err
	}
	o.meta, o.metaRaw = meta, raw
	o.waiting = len(s.after)+len(s.afterJobs) > 0
	return nil
}

// Workflow is the id of the workflow the job is a step of ("" for none).
func (j *Job[T]) Workflow() string { return j.Meta[MetaWorkflow] }

// Step is the job's step name in its workflow ("" for none).
func (j *Job[T]) Step() string { return j.Meta[MetaStep] }
