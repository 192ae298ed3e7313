package dashboard

import (
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"time"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/jobs"
)

// workflowLayerMax is how many steps a layer of the workflow page shows:
// a batch of 100,000 jobs is one layer, which no page shows whole.
const workflowLayerMax = 200

// workflowsPageSize is how many workflows with live steps a page lists.
const workflowsPageSize = 100

// workflowsData is the workflows page: the form that looks a workflow up
// and, without one named, a page of the workflows with live steps; once
// one is named, its steps in layers.
type workflowsData struct {
	ID string // the workflow asked for, "" for the form and the list
	// Workflows are the workflows with live steps, in id order, and Next
	// the list's next page ("" on the last one), without an ID.
	Workflows []liveWorkflow
	Next      template.URL
	Steps     int
	// Counts are how many steps are in each state, in jobs.States' order.
	Counts []stateCount
	// Live counts the steps Cancel cancels, Failed those Retry brings back.
	Live, Failed int
	Layers       []workflowLayer
	At           time.Time
}

// liveWorkflow is a row of the list: a workflow with live steps, and how
// long ago its oldest live step was enqueued.
type liveWorkflow struct {
	hopper.WorkflowSummary
	Age time.Duration
}

type stateCount struct {
	State jobs.State
	N     int
}

// workflowLayer is one column of the graph: the steps whose parents are
// all in the columns before it, one of them in the column just before.
type workflowLayer struct {
	N      int // 1 for the steps without parents
	Steps  []workflowNode
	Hidden int // steps of the layer beyond workflowLayerMax
}

type workflowNode struct {
	hopper.WorkflowStep
	ParentSteps []parentStep
}

// parentStep is a step's parent as the page names it: by its step name,
// or by its id alone when it is no longer known (it completed and left
// the history).
type parentStep struct {
	ID    int64
	Step  string
	Known bool
}

// workflowQuery is the address of a workflow's page, from the dashboard's
// root.
func workflowQuery(id string) string {
	return "workflows?" + url.Values{"id": {id}}.Encode()
}

// workflowsPage shows the form, and the workflow ?id= names; without one,
// the workflows with live steps, in id order, a page at a time
// (?after=ID).
func (d *Dashboard) workflowsPage(w http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get("id")
	if id == "" {
		d.workflowsList(w, r)
		return
	}
	steps, err := d.reads.ListWorkflow(r.Context(), id)
	if errors.Is(err, hopper.ErrNotFound) {
		err = noWorkflow(id, err)
	}
	if err != nil {
		d.failErr(w, r, err)
		return
	}
	d.render(w, r, http.StatusOK, "workflows", "Workflow "+id, workflowOf(id, steps))
}

// workflowsList is the workflows page without an id: the form, and a
// page of the workflows with live steps.
func (d *Dashboard) workflowsList(w http.ResponseWriter, r *http.Request) {
	after := r.URL.Query().Get("after")
	list, err := d.reads.ListWorkflows(r.Context(), hopper.WorkflowPage{After: after, Limit: workflowsPageSize})
	if err != nil {
		d.failErr(w, r, err)
		return
	}
	data := workflowsData{Workflows: make([]liveWorkflow, len(list)), At: time.Now()}
	for i, s := range list {
		data.Workflows[i] = liveWorkflow{WorkflowSummary: s, Age: data.At.Sub(s.Oldest)}
	}
	if len(list) == workflowsPageSize {
		last := list[len(list)-1].ID
		more, err := d.reads.ListWorkflows(r.Context(), hopper.WorkflowPage{After: last, Limit: 1})
		if err != nil {
			d.failErr(w, r, err)
			return
		}
		if len(more) > 0 {
			// Built here from escaped parts, as the sequences' next page is.
			data.Next = template.URL("workflows?" + url.Values{"after": {last}}.Encode())
		}
	}
	d.render(w, r, http.StatusOK, "workflows", "Workflows", data)
}

func noWorkflow(id string, err error) error {
	return &pageError{http.StatusNotFound, fmt.Sprintf("No workflow %s: no step of it is known (never enqueued, "+
		"or its steps completed and left the history, or were purged).", id), err}
}

// workflowOf lays a workflow's steps out in layers: a step's layer is one
// more than the highest of its parents' (1 without parents; a parent no
// longer known counts for none), each layer in id order.
func workflowOf(id string, steps []hopper.WorkflowStep) workflowsData {
	data := workflowsData{ID: id, Steps: len(steps), At: time.Now()}
	byID := make(map[int64]int, len(steps))
	for i, s := range steps {
		byID[s.ID] = i
	}
	layer := make([]int, len(steps)) // 0: not computed yet
	var layerOf func(i int, depth int) int
	layerOf = func(i int, depth int) int {
		if layer[i] > 0 {
			return layer[i]
		}
		if depth > len(steps) { // a cycle, which the schema's edges never make: stop
			return 1
		}
		n := 1
		for _, p := range steps[i].Parents {
			if j, ok := byID[p]; ok {
				n = max(n, layerOf(j, depth+1)+1)
			}
		}
		layer[i] = n
		return n
	}
	counts := map[jobs.State]int{}
	for i, s := range steps {
		n := layerOf(i, 0)
		for len(data.Layers) < n {
			data.Layers = append(data.Layers, workflowLayer{N: len(data.Layers) + 1})
		}
		l := &data.Layers[n-1]
		counts[s.State]++
		switch {
		case s.State.Live():
			data.Live++
		case s.State == jobs.StateDead || s.State == jobs.StateCancelled:
			data.Failed++
		}
		if len(l.Steps) == workflowLayerMax {
			l.Hidden++
			continue
		}
		node := workflowNode{WorkflowStep: s, ParentSteps: make([]parentStep, len(s.Parents))}
		for k, p := range s.Parents {
			node.ParentSteps[k] = parentStep{ID: p}
			if j, ok := byID[p]; ok {
				node.ParentSteps[k].Step, node.ParentSteps[k].Known = steps[j].Step, true
			}
		}
		l.Steps = append(l.Steps, node)
	}
	for _, st := range jobs.States() {
		if counts[st] > 0 {
			data.Counts = append(data.Counts, stateCount{st, counts[st]})
		}
	}
	return data
}

// formWorkflow is the workflow a change's form names.
func formWorkflow(r *http.Request) (string, error) {
	id := r.PostFormValue("id")
	if id == "" {
		return "", fmt.Errorf("%w: the form names no workflow", hopper.ErrInvalidFilter)
	}
	return id, nil
}

// cancelWorkflow cancels a workflow's live steps.
func (d *Dashboard) cancelWorkflow(r *http.Request) (string, string, error) {
	id, err := formWorkflow(r)
	if err != nil {
		return "", "", err
	}
	if _, err := d.client.ListWorkflow(r.Context(), id); err != nil {
		if errors.Is(err, hopper.ErrNotFound) {
			err = noWorkflow(id, err)
		}
		return "", "", err
	}
	ids, err := d.client.CancelWorkflow(r.Context(), id)
	if err != nil {
		return "", "", err
	}
	if len(ids) == 0 {
		return "", "", &pageError{http.StatusConflict, fmt.Sprintf("Workflow %s has no live step: nothing was cancelled.", id), nil}
	}
	d.cfg.Logger.Warn("dashboard: workflow cancelled", "workflow", id, "steps", len(ids))
	return workflowQuery(id), fmt.Sprintf("Workflow %s: %d step(s) cancelled.", id, len(ids)), nil
}

// retryWorkflow brings a workflow's dead and cancelled steps back.
func (d *Dashboard) retryWorkflow(r *http.Request) (string, string, error) {
	id, err := formWorkflow(r)
	if err != nil {
		return "", "", err
	}
	ids, err := d.client.RetryWorkflow(r.Context(), id)
	if err != nil {
		return "", "", err
	}
	if len(ids) == 0 {
		if _, err := d.client.ListWorkflow(r.Context(), id); errors.Is(err, hopper.ErrNotFound) {
			return "", "", noWorkflow(id, err)
		}
		return "", "", &pageError{http.StatusConflict, fmt.Sprintf("Workflow %s has no dead or cancelled step: nothing was retried.", id), nil}
	}
	d.cfg.Logger.Info("dashboard: workflow retried", "workflow", id, "steps", len(ids))
	return workflowQuery(id), fmt.Sprintf("Workflow %s: %d step(s) back; each runs once its parents have succeeded.", id, len(ids)), nil
}
