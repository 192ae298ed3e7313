package hoppertest

import (
	"context"
	"fmt"
	"strings"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/jobs"
)

// TB is what the helpers need of a test: *testing.T and *testing.B have
// it.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	Cleanup(func())
}

// Filter narrows the jobs RequireEnqueued and its siblings look at.
type Filter interface{ apply(*filters) }

type filters struct {
	queue, uniqueKey string
	where            []func(any) bool
}

type filterFunc func(*filters)

func (f filterFunc) apply(fs *filters) { f(fs) }

// Queue keeps the jobs of one queue.
func Queue(name string) Filter { return filterFunc(func(f *filters) { f.queue = name }) }

// UniqueKey keeps the job holding a unique key.
func UniqueKey(key string) Filter { return filterFunc(func(f *filters) { f.uniqueKey = key }) }

// Where keeps the jobs whose typed payload pred accepts.
func Where[T any](pred func(T) bool) Filter {
	return filterFunc(func(f *filters) {
		f.where = append(f.where, func(p any) bool {
			t, ok := p.(T)
			return ok && pred(t)
		})
	})
}

// RequireEnqueued fails the test unless dbtx shows at least one live job
// (pending, scheduled or running) of kind matching filters, and returns
// them, newest first, with their typed payloads. Given the transaction a
// request ran in, it sees what that transaction enqueued before it
// commits.
func RequireEnqueued[T any](t TB, dbtx jobs.DBTX, kind *jobs.Kind[T], fs ...Filter) []*jobs.Job[T] {
	t.Helper()
	found := enqueued(t, dbtx, kind, fs)
	if len(found) == 0 {
		t.Fatalf("hoppertest: no %s job enqueued%s", kind.Name(), describe(fs))
	}
	return found
}

// RequireNotEnqueued fails the test if dbtx shows a live job of kind
// matching filters.
func RequireNotEnqueued[T any](t TB, dbtx jobs.DBTX, kind *jobs.Kind[T], fs ...Filter) {
	t.Helper()
	if found := enqueued(t, dbtx, kind, fs); len(found) > 0 {
		t.Fatalf("hoppertest: %d %s job(s) enqueued%s, want none (first: id %d, payload %+v)",
			len(found), kind.Name(), describe(fs), found[0].ID, found[0].Payload)
	}
}

// RequireManyEnqueued fails the test unless dbtx shows exactly n live jobs
// of kind matching filters, and returns them, newest first.
func RequireManyEnqueued[T any](t TB, dbtx jobs.DBTX, kind *jobs.Kind[T], n int, fs ...Filter) []*jobs.Job[T] {
	t.Helper()
	found := enqueued(t, dbtx, kind, fs)
	if len(found) != n {
		t.Fatalf("hoppertest: %d %s job(s) enqueued%s, want %d", len(found), kind.Name(), describe(fs), n)
	}
	return found
}

// enqueued reads the live jobs of kind through the operations API, every
// page, and keeps those the filters accept.
func enqueued[T any](t TB, dbtx jobs.DBTX, kind *jobs.Kind[T], fs []Filter) []*jobs.Job[T] {
	t.Helper()
	var f filters
	for _, filter := range fs {
		filter.apply(&f)
	}
	client := hopper.NewClient(dbtx)
	p := hopper.ListParams{
		Kind: kind.Name(), Queue: f.queue, UniqueKey: f.uniqueKey, Limit: hopper.MaxListLimit,
		States: []jobs.State{jobs.StatePending, jobs.StateScheduled, jobs.StateWaiting, jobs.StateRunning},
	}
	found := []*jobs.Job[T]{}
	for {
		page, err := client.ListJobs(context.Background(), p)
		if err != nil {
			t.Fatalf("hoppertest: list %s jobs: %v", kind.Name(), err)
			return nil
		}
	rows:
		for _, row := range page.Jobs {
			job, err := kind.Decode(row)
			if err != nil {
				t.Fatalf("hoppertest: %v", err)
				return nil
			}
			for _, pred := range f.where {
				if !pred(job.Payload) {
					continue rows
				}
			}
			found = append(found, job)
		}
		if page.Next == "" {
			return found
		}
		p.After = page.Next
	}
}

func describe(fs []Filter) string {
	var f filters
	for _, filter := range fs {
		filter.apply(&f)
	}
	var parts []string
	if f.queue != "" {
		parts = append(parts, "queue "+f.queue)
	}
	if f.uniqueKey != "" {
		parts = append(parts, "unique key "+f.uniqueKey)
	}
	if len(f.where) > 0 {
		parts = append(parts, fmt.Sprintf("%d payload condition(s)", len(f.where)))
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ")"
}
