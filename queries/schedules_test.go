package queries_test

import (
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/testbed/testdb"
)

func define(t *testing.T, b *bundle, q *db.Queries, hash, expr string, staleAfter time.Duration) (db.DefineScheduleRow, error) {
	t.Helper()
	require.NoError(t, q.SeeScheduleVersions(b.Ctx, db.SeeScheduleVersionsParams{Names: []string{"s"}, Hashes: []string{hash}, StaleAfterMs: staleAfter.Milliseconds()}))
	return q.DefineSchedule(b.Ctx, db.DefineScheduleParams{
		Name: "s", DefinitionHash: hash, Kind: "k", Expression: expr, TimeZone: "UTC", Policy: "once", Queue: "default",
		NextFireAt: time.Now().Add(time.Duration(len(expr)) * time.Minute), // a time of its own, to see which one is kept
	})
}

func schedule(t *testing.T, b *bundle) db.ListSchedulesRow {
	t.Helper()
	rows, err := b.Queries.ListSchedules(b.Ctx)
	require.NoError(t, err)
	require.Len(t, rows, 1)
	return rows[0]
}

// TestDefineScheduleRules: the definition first seen last is in force; an
// older one does not take it back while the newer one is reported; a stale
// one gives way to any other; next_fire_at stays while the expression does.
func TestDefineScheduleRules(t *testing.T) {
	b := setup(t)
	row, err := define(t, b, b.Queries, "v1", "@every 1m", time.Hour)
	require.NoError(t, err)
	require.True(t, row.InForce, "a new schedule takes its first definition")
	first := schedule(t, b).NextFireAt

	row, err = define(t, b, b.Queries, "v1", "@every 1m", time.Hour)
	require.NoError(t, err)
	require.True(t, row.InForce)
	require.True(t, schedule(t, b).NextFireAt.Equal(first), "the same definition again changes nothing")

	// A newer deploy, same expression, another queue: in force, same next.
	row, err = define(t, b, b.Queries, "v2", "@every 1m", time.Hour)
	require.NoError(t, err)
	require.True(t, row.InForce)
	require.True(t, schedule(t, b).NextFireAt.Equal(first), "next_fire_at stays while the expression does")

	// The old one again (an old pod restarting): not in force.
	row, err = define(t, b, b.Queries, "v1", "@every 1m", time.Hour)
	require.NoError(t, err)
	require.False(t, row.InForce, "an older definition does not take a newer one back")

	// A third, with another expression: in force, with its own next.
	row, err = define(t, b, b.Queries, "v3", "@every 2m", time.Hour)
	require.NoError(t, err)
	require.True(t, row.InForce)
	s := schedule(t, b)
	require.Equal(t, "@every 2m", s.Expression)
	require.False(t, s.NextFireAt.Equal(first), "a new expression, a new next_fire_at")
	require.False(t, s.Stale)

	// v3 goes stale (nobody reported it for longer than its window): the
	// older v2 may take over again, and the schedule reads stale until it
	// does. The report is moved back rather than waited out, so that a
	// slow machine cannot make v3 stale before it is checked above.
	_, err = b.Pool.Exec(b.Ctx, "UPDATE hopper_schedule_versions SET last_seen_at = now() - interval '2 hours' WHERE name = 's' AND hash = 'v3'")
	require.NoError(t, err)
	require.True(t, schedule(t, b).Stale)
	row, err = define(t, b, b.Queries, "v2", "@every 1m", time.Hour)
	require.NoError(t, err)
	require.True(t, row.InForce, "a stale definition gives way")
	require.False(t, schedule(t, b).Stale)
}

// TestDefineScheduleRace: two workers define a new schedule at once; the
// second's insert waits for the first and its snapshot cannot see the row:
// no row comes back (the worker then asks again, and sees it).
func TestDefineScheduleRace(t *testing.T) {
	b := setup(t)
	tx, err := b.Pool.Begin(b.Ctx)
	require.NoError(t, err)
	defer tx.Rollback(b.Ctx) //nolint:errcheck
	_, err = define(t, b, db.New(tx), "v1", "@every 1m", time.Hour)
	require.NoError(t, err)
	second := make(chan error, 1)
	go func() {
		_, err := b.Queries.DefineSchedule(b.Ctx, db.DefineScheduleParams{Name: "s", DefinitionHash: "v1", Kind: "k",
			Expression: "@every 1m", TimeZone: "UTC", Policy: "once", Queue: "default", NextFireAt: time.Now()})
		second <- err
	}()
	testdb.WaitFor(t, "the second waiting on the first's insert", func() bool {
		var n int
		require.NoError(t, b.Pool.QueryRow(b.Ctx, "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%DefineSchedule%'").Scan(&n))
		return n > 0
	})
	require.NoError(t, tx.Commit(b.Ctx))
	require.True(t, errors.Is(<-second, pgx.ErrNoRows), "the second sees no row: ask again")
	row, err := define(t, b, b.Queries, "v1", "@every 1m", time.Hour)
	require.NoError(t, err)
	require.True(t, row.InForce, "asked again, it does")
}

// TestFireSchedule: DueSchedule takes a due schedule once (SKIP LOCKED);
// AdvanceSchedule is a compare-and-set; pause, trigger and resume.
func TestFireSchedule(t *testing.T) {
	b := setup(t)
	_, err := define(t, b, b.Queries, "v1", "@every 1m", time.Hour)
	require.NoError(t, err)
	names := []string{"s"}
	_, err = b.Queries.DueSchedule(b.Ctx, names)
	require.ErrorIs(t, err, pgx.ErrNoRows, "not due yet")
	_, err = b.Pool.Exec(b.Ctx, "UPDATE hopper_schedules SET next_fire_at = now() - interval '1 second'")
	require.NoError(t, err)

	tx, err := b.Pool.Begin(b.Ctx)
	require.NoError(t, err)
	defer tx.Rollback(b.Ctx) //nolint:errcheck
	due, err := db.New(tx).DueSchedule(b.Ctx, names)
	require.NoError(t, err)
	require.Equal(t, "s", due.Name)
	_, err = b.Queries.DueSchedule(b.Ctx, names)
	require.ErrorIs(t, err, pgx.ErrNoRows, "taken: another worker skips it")
	following := due.Now.Add(time.Minute)
	n, err := db.New(tx).AdvanceSchedule(b.Ctx, db.AdvanceScheduleParams{Name: "s", Following: following, Fired: true,
		LastSlot: &due.NextFireAt, ExpectedNext: due.NextFireAt.Add(time.Second)})
	require.NoError(t, err)
	require.Zero(t, n, "compare-and-set: a next_fire_at it did not read moves nothing")
	n, err = db.New(tx).AdvanceSchedule(b.Ctx, db.AdvanceScheduleParams{Name: "s", Following: following, Fired: true,
		LastSlot: &due.NextFireAt, ExpectedNext: due.NextFireAt})
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	require.NoError(t, tx.Commit(b.Ctx))
	s := schedule(t, b)
	require.True(t, s.NextFireAt.Equal(following))
	require.True(t, s.LastSlot.Equal(due.NextFireAt))
	require.NotNil(t, s.LastFireAt)

	next, err := b.Queries.NextScheduleFire(b.Ctx, names)
	require.NoError(t, err)
	require.True(t, next.Equal(following))

	// Paused: not due, however late; a trigger is due even so.
	was, err := b.Queries.PauseSchedule(b.Ctx, "s")
	require.NoError(t, err)
	require.False(t, was.WasPaused)
	require.False(t, was.PausedAt.IsZero())
	_, err = b.Pool.Exec(b.Ctx, "UPDATE hopper_schedules SET next_fire_at = now() - interval '1 hour'")
	require.NoError(t, err)
	_, err = b.Queries.DueSchedule(b.Ctx, names)
	require.ErrorIs(t, err, pgx.ErrNoRows, "paused")
	at, err := b.Queries.TriggerSchedule(b.Ctx, "s")
	require.NoError(t, err)
	due, err = b.Queries.DueSchedule(b.Ctx, names)
	require.NoError(t, err)
	require.True(t, due.Paused)
	require.True(t, due.TriggeredAt.Equal(at))
	again, err := b.Queries.TriggerSchedule(b.Ctx, "s")
	require.NoError(t, err)
	require.True(t, again.Equal(at), "a waiting trigger is kept")

	resumeAt := time.Now().Add(time.Minute).Truncate(time.Microsecond)
	res, err := b.Queries.ResumeSchedule(b.Ctx, db.ResumeScheduleParams{Name: "s", NextFireAt: resumeAt})
	require.NoError(t, err)
	require.True(t, res.WasPaused)
	require.NotNil(t, res.PausedAt)
	require.True(t, res.PausedAt.Equal(was.PausedAt), "a resume says since when it was paused")
	require.True(t, schedule(t, b).NextFireAt.Equal(resumeAt), "resumed at the next slot, not the missed ones")
	_, err = b.Queries.PauseSchedule(b.Ctx, "nope")
	require.ErrorIs(t, err, pgx.ErrNoRows)
}
