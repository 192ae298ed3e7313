package jobs_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/jobs"
)

// TestEnqueueOnReadOnlyNamesTheFix: every enqueue path on a session that
// refuses writes (as a standby, or a primary a failover demoted, answers:
// SQLSTATE 25006, made here with default_transaction_read_only) returns
// jobs.ErrReadOnly, whose message names target_session_attrs=read-write,
// and keeps the database's error for errors.As.
func TestEnqueueOnReadOnlyNamesTheFix(t *testing.T) {
	b := setup(t)
	cfg, err := pgxpool.ParseConfig(b.URL)
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["default_transaction_read_only"] = "on"
	ro, err := pgxpool.NewWithConfig(b.Ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(ro.Close)
	k := jobs.MustDefine[struct{ N int }]("readonly.enqueue")
	for _, c := range []struct {
		name    string
		enqueue func(context.Context, jobs.DBTX) error
	}{
		{"plain", func(ctx context.Context, d jobs.DBTX) error {
			_, err := k.Enqueue(ctx, d, struct{ N int }{1})
			return err
		}},
		{"live unique key", func(ctx context.Context, d jobs.DBTX) error {
			_, err := k.Enqueue(ctx, d, struct{ N int }{1}, jobs.UniqueKey("ro:1"))
			return err
		}},
		{"unique period (locked)", func(ctx context.Context, d jobs.DBTX) error {
			_, err := k.Enqueue(ctx, d, struct{ N int }{1}, jobs.UniqueKey("ro:2"), jobs.UniquePeriod(time.Hour))
			return err
		}},
		{"many", func(ctx context.Context, d jobs.DBTX) error {
			_, err := k.EnqueueMany(ctx, d, jobs.Items(struct{ N int }{1}, struct{ N int }{2}))
			return err
		}},
		{"raw", func(ctx context.Context, d jobs.DBTX) error {
			_, err := jobs.EnqueueRaw(ctx, d, "readonly.raw", 1, []byte(`{}`))
			return err
		}},
		{"workflow", func(ctx context.Context, d jobs.DBTX) error {
			w := jobs.NewWorkflow("ro-wf").Add("a", k.Entry(struct{ N int }{1})).Add("b", k.Entry(struct{ N int }{2}), jobs.After("a"))
			_, err := jobs.EnqueueWorkflow(ctx, d, w)
			return err
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.enqueue(b.Ctx, ro)
			require.ErrorIs(t, err, jobs.ErrReadOnly)
			require.ErrorContains(t, err, "target_session_attrs=read-write")
			var pgErr *pgconn.PgError
			require.True(t, errors.As(err, &pgErr), "the database's error: %v", err)
			require.Equal(t, "25006", pgErr.Code)
			require.NoError(t, c.enqueue(b.Ctx, b.Pool), "a writable session takes it")
		})
	}
}
