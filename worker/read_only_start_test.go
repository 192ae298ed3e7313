package worker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/worker"
)

// TestStartOnReadOnlyNamesTheFix: a worker whose pool reaches a server
// that refuses writes (a standby, answering SQLSTATE 25006; made here with
// default_transaction_read_only) stops at start with worker.ErrReadOnly,
// whose message names target_session_attrs=read-write, and keeps the
// database's error for errors.As. A schedule-only worker is refused too.
func TestStartOnReadOnlyNamesTheFix(t *testing.T) {
	for _, schedulesOnly := range []bool{false, true} {
		name := "handlers"
		if schedulesOnly {
			name = "schedules only"
		}
		t.Run(name, func(t *testing.T) {
			b := setup(t)
			cfg, err := pgxpool.ParseConfig(b.URL)
			require.NoError(t, err)
			cfg.ConnConfig.RuntimeParams["default_transaction_read_only"] = "on"
			pool, err := pgxpool.NewWithConfig(b.Ctx, cfg)
			require.NoError(t, err)
			t.Cleanup(pool.Close)
			w, err := worker.New(pool, fast(worker.Config{Logger: quiet}))
			require.NoError(t, err)
			k := kind(t, "readonly.start."+b.Schema)
			if schedulesOnly {
				require.NoError(t, worker.Schedule(w, "readonly-tick", k, "@every 1h", func(time.Time) Task { return Task{} }))
			} else {
				require.NoError(t, worker.Handle(w, k, func(context.Context, *jobs.Job[Task]) error { return nil }))
			}
			err = w.Run(b.Ctx)
			require.ErrorIs(t, err, worker.ErrReadOnly)
			require.ErrorIs(t, err, jobs.ErrReadOnly)
			require.ErrorContains(t, err, "target_session_attrs=read-write")
			var pgErr *pgconn.PgError
			require.True(t, errors.As(err, &pgErr), "%v", err)
			require.Equal(t, "25006", pgErr.Code)
		})
	}
}
