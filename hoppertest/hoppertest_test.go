package hoppertest_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/hoppertest"
	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/worker"
)

type Invoice struct {
	Customer string `json:"customer"`
	Cents    int    `json:"cents"`
}

var sendInvoice = jobs.MustDefine[Invoice]("send_invoice", jobs.Defaults(jobs.Queue("billing"), jobs.MaxAttempts(3)))

// fakeT records a helper's failure instead of failing the test, so that a
// test can check that a helper fails when it should.
type fakeT struct {
	failed   string
	cleanups []func()
}

func (f *fakeT) Helper()                           {}
func (f *fakeT) Fatalf(format string, args ...any) { f.failed = fmt.Sprintf(format, args...) }
func (f *fakeT) Cleanup(fn func())                 { f.cleanups = append(f.cleanups, fn) }

func TestWorkOutcomes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var tx jobs.DBTX = fakeDB{}
	for _, tc := range []struct {
		name    string
		opts    []hoppertest.WorkOption
		handler func(context.Context, *jobs.Job[Invoice]) error
		want    worker.Outcome
		check   func(t *testing.T, res hoppertest.Result)
	}{
		{name: "done", want: worker.OutcomeDone, handler: func(context.Context, *jobs.Job[Invoice]) error { return nil }},
		{name: "failed with attempts left", want: worker.OutcomeFailed,
			handler: func(context.Context, *jobs.Job[Invoice]) error { return errors.New("smtp down") },
			check:   func(t *testing.T, res hoppertest.Result) { require.Equal(t, "smtp down", res.Message) }},
		{name: "failed on the last attempt", want: worker.OutcomeDead, opts: []hoppertest.WorkOption{hoppertest.Attempt(3)},
			handler: func(context.Context, *jobs.Job[Invoice]) error { return errors.New("smtp down") },
			check:   func(t *testing.T, res hoppertest.Result) { require.Equal(t, "out of attempts", res.Reason) }},
		{name: "permanent", want: worker.OutcomeDead,
			handler: func(context.Context, *jobs.Job[Invoice]) error {
				return worker.Permanent(errors.New("no such customer"))
			}},
		{name: "snoozed", want: worker.OutcomeSnoozed,
			handler: func(context.Context, *jobs.Job[Invoice]) error { return worker.Snooze(time.Hour) },
			check: func(t *testing.T, res hoppertest.Result) {
				require.WithinDuration(t, time.Now().Add(time.Hour), res.Until, time.Minute)
			}},
		{name: "retry at", want: worker.OutcomeFailed,
			handler: func(context.Context, *jobs.Job[Invoice]) error {
				return worker.RetryAfter(time.Hour, errors.New("busy"))
			},
			check: func(t *testing.T, res hoppertest.Result) {
				require.WithinDuration(t, time.Now().Add(time.Hour), res.Until, time.Minute)
			}},
		{name: "cancelled", want: worker.OutcomeCancelled,
			handler: func(context.Context, *jobs.Job[Invoice]) error { return worker.Cancel(errors.New("account closed")) }},
		{name: "panicked", want: worker.OutcomeFailed,
			handler: func(context.Context, *jobs.Job[Invoice]) error { panic("boom") },
			check: func(t *testing.T, res hoppertest.Result) {
				var pe *worker.PanicError
				require.ErrorAs(t, res.Err, &pe)
				require.Equal(t, "boom", pe.Value)
			}},
		{name: "extends its lease and acks in its transaction", want: worker.OutcomeDone,
			handler: func(ctx context.Context, job *jobs.Job[Invoice]) error {
				if err := worker.ExtendLease(ctx, job, time.Minute); err != nil {
					return err
				}
				return worker.AckTx(ctx, tx, job)
			},
			check: func(t *testing.T, res hoppertest.Result) {
				require.Equal(t, []time.Duration{time.Minute}, res.Extensions)
				require.Equal(t, tx, res.AckedInTx)
			}},
		{name: "sees the job as stored", want: worker.OutcomeDone,
			opts: []hoppertest.WorkOption{hoppertest.Metadata(jobs.Meta{"tenant": "acme"}), hoppertest.ID(42), hoppertest.Attempt(2)},
			handler: func(_ context.Context, job *jobs.Job[Invoice]) error {
				if job.ID != 42 || job.Attempt != 2 || job.MaxAttempts != 3 || job.Queue != "billing" ||
					job.Meta["tenant"] != "acme" || job.Payload != (Invoice{Customer: "c-1", Cents: 1200}) {
					return fmt.Errorf("unexpected job %+v", job)
				}
				return nil
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := hoppertest.Work(ctx, sendInvoice, tc.handler, Invoice{Customer: "c-1", Cents: 1200}, tc.opts...)
			require.Equal(t, tc.want, res.Outcome, "err: %v", res.Err)
			if tc.check != nil {
				tc.check(t, res)
			}
		})
	}
}

// fakeDB stands for a transaction in Work's tests: AckTx only records it.
type fakeDB struct{ jobs.DBTX }

func TestRequireEnqueued(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := hoppertest.Schema(t, testdb.URL())
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck // the test's end
	for _, inv := range []Invoice{{"c-1", 100}, {"c-2", 200}} {
		_, err := sendInvoice.Enqueue(ctx, tx, inv)
		require.NoError(t, err)
	}
	_, err = sendInvoice.Enqueue(ctx, tx, Invoice{"c-3", 300}, jobs.Queue("urgent"), jobs.UniqueKey("inv-3"))
	require.NoError(t, err)

	// The transaction sees its own jobs; the pool does not, until commit.
	found := hoppertest.RequireEnqueued(t, tx, sendInvoice, hoppertest.Where(func(i Invoice) bool { return i.Cents >= 200 }))
	require.Len(t, found, 2)
	require.Equal(t, "c-3", found[0].Payload.Customer, "newest first")
	hoppertest.RequireManyEnqueued(t, tx, sendInvoice, 2, hoppertest.Queue("billing"))
	hoppertest.RequireManyEnqueued(t, tx, sendInvoice, 1, hoppertest.UniqueKey("inv-3"))
	hoppertest.RequireNotEnqueued(t, pool, sendInvoice)

	// And they fail when they should, saying what they found.
	var f fakeT
	hoppertest.RequireEnqueued(&f, tx, sendInvoice, hoppertest.Queue("nowhere"))
	require.Equal(t, "hoppertest: no send_invoice job enqueued (queue nowhere)", f.failed)
	f = fakeT{}
	hoppertest.RequireNotEnqueued(&f, tx, sendInvoice, hoppertest.Queue("urgent"))
	require.True(t, strings.HasPrefix(f.failed, "hoppertest: 1 send_invoice job(s) enqueued (queue urgent), want none"), f.failed)
	f = fakeT{}
	hoppertest.RequireManyEnqueued(&f, tx, sendInvoice, 5)
	require.Equal(t, "hoppertest: 3 send_invoice job(s) enqueued, want 5", f.failed)

	require.NoError(t, tx.Commit(ctx))
	hoppertest.RequireManyEnqueued(t, pool, sendInvoice, 3)
}

func TestSchemaIsOwnAndDropped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var f fakeT
	a := hoppertest.Schema(&f, testdb.URL())
	b := hoppertest.Schema(t, testdb.URL())
	require.Empty(t, f.failed)
	_, err := sendInvoice.Enqueue(ctx, a, Invoice{Customer: "only in a"})
	require.NoError(t, err)
	hoppertest.RequireManyEnqueued(t, a, sendInvoice, 1)
	hoppertest.RequireNotEnqueued(t, b, sendInvoice)

	var name string
	require.NoError(t, b.QueryRow(ctx, "SELECT current_schema()").Scan(&name))
	require.True(t, strings.HasPrefix(name, "hoppertest_"), name)
	require.NoError(t, a.QueryRow(ctx, "SELECT current_schema()").Scan(&name))
	for _, fn := range f.cleanups {
		fn()
	}
	var exists bool
	require.NoError(t, b.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_namespace WHERE nspname = $1)", name).Scan(&exists))
	require.False(t, exists, "the schema is dropped at cleanup")
	require.Empty(t, f.failed)
}
