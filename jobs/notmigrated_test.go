package jobs_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/internal/testdb"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/schema"
)

// requireNotMigrated: err is jobs.ErrNotMigrated, saying what is missing,
// the version this build needs, and what to run.
func requireNotMigrated(t *testing.T, err error, missing string) {
	t.Helper()
	require.ErrorIs(t, err, jobs.ErrNotMigrated)
	require.ErrorContains(t, err, "hopper: schema not migrated: "+missing)
	require.ErrorContains(t, err, "does not exist: this build")
	require.ErrorContains(t, err, fmt.Sprintf("this build of Hopper needs schema version %d; run `hopper migrate up", schema.Latest()))
}

// TestEnqueueNotMigrated: on a schema migrated only part of the way (an
// upgrade without `hopper migrate up`), every enqueue path says so with
// jobs.ErrNotMigrated, never a bare "relation does not exist", and keeps
// the database's error for errors.As. The versions from 6 on have every
// column enqueueing needs: there it works.
func TestEnqueueNotMigrated(t *testing.T) {
	t.Parallel()
	for v := uint(0); v < schema.Latest(); v++ {
		t.Run(fmt.Sprintf("version %d", v), func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			pool := testdb.NewAtVersion(t, v).Pool
			enqueues := map[string]func() error{
				"Enqueue": func() error {
					_, err := noteKind.Enqueue(ctx, pool, Note{Text: "a"}, jobs.ConcurrencyKey("k"))
					return err
				},
				"EnqueueRaw": func() error {
					_, err := jobs.EnqueueRaw(ctx, pool, "raw", 1, json.RawMessage(`{}`))
					return err
				},
				"EnqueueMany (COPY)": func() error {
					_, err := noteKind.EnqueueMany(ctx, pool, jobs.Items(Note{Text: "b"}, Note{Text: "c"}))
					return err
				},
				"EnqueueMany (now and later)": func() error {
					_, err := noteKind.EnqueueMany(ctx, pool, []jobs.Item[Note]{{Payload: Note{}}, {Payload: Note{}, Options: []jobs.EnqueueOption{jobs.Delay(time.Hour)}}})
					return err
				},
				"EnqueueBatch (unique)": func() error {
					_, err := jobs.EnqueueBatch(ctx, pool, []jobs.Entry{noteKind.Entry(Note{}, jobs.UniqueKey("u"))})
					return err
				},
			}
			for name, enqueue := range enqueues {
				err := enqueue()
				if v >= 6 {
					require.NoError(t, err, name)
					continue
				}
				missing := `column "` // meta (5) or concurrency_key (6)
				if v == 0 {
					missing = `relation "hopper_jobs`
				}
				requireNotMigrated(t, err, missing)
				var pgErr *pgconn.PgError
				require.ErrorAs(t, err, &pgErr, name)
			}
		})
	}
}

// TestEnqueueNotMigratedInSchema: through jobs.InSchema the command to run
// names the schema.
func TestEnqueueNotMigratedInSchema(t *testing.T) {
	b := setup(t)
	empty := testdb.NewEmpty(t)
	scoped, err := jobs.InSchema(b.Pool, empty.Schema)
	require.NoError(t, err)
	_, err = noteKind.Enqueue(b.Ctx, scoped, Note{})
	requireNotMigrated(t, err, `relation "hopper_jobs"`)
	require.ErrorContains(t, err, "run `hopper migrate up --schema "+empty.Schema+"` (or schema.Up with schema.Name)")
}

// TestEnqueueHookErrorNotExplained: a hook's own statement that finds no
// table is the hook's error, not Hopper's schema.
func TestEnqueueHookErrorNotExplained(t *testing.T) {
	b := setup(t)
	k := jobs.MustDefine[Note]("note.hooked", jobs.OnEnqueue(func(ctx context.Context, e *jobs.Enqueueing) error {
		_, err := e.DB.Exec(ctx, "INSERT INTO no_such_audit_table VALUES (1)")
		return err
	}))
	_, err := k.Enqueue(b.Ctx, b.Pool, Note{})
	require.ErrorContains(t, err, `relation "no_such_audit_table" does not exist`)
	require.False(t, errors.Is(err, jobs.ErrNotMigrated), "%v", err)
}
