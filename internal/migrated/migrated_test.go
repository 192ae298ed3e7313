package migrated_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/internal/migrated"
	"github.com/hopperq/hopper/internal/testbed/testdb"
)

// TestExplain: the four "does not exist" codes become ErrNotMigrated with
// the database's message, the version needed and what to run, keeping the
// database's error; anything else passes through untouched.
func TestExplain(t *testing.T) {
	t.Parallel()
	for _, code := range []string{"42P01", "42703", "42883", "42704"} {
		pgErr := &pgconn.PgError{Code: code, Message: `relation "hopper_jobs" does not exist`}
		err := migrated.Explain(fmt.Errorf("stats: %w", pgErr), nil)
		require.ErrorIs(t, err, migrated.ErrNotMigrated, code)
		var got *pgconn.PgError
		require.ErrorAs(t, err, &got, code)
		require.Equal(t, fmt.Sprintf("hopper: schema not migrated: relation \"hopper_jobs\" does not exist: this build of Hopper needs schema version %d; run `hopper migrate up` (or schema.Up)", migrated.Latest), err.Error())
		require.Same(t, err, migrated.Explain(err, nil), "explained once")
	}
	for _, err := range []error{nil, pgx.ErrNoRows, errors.New("other"), &pgconn.PgError{Code: "23505"}, context.Canceled} {
		require.Equal(t, err, migrated.Explain(err, nil))
	}
}

// TestCheck reads the version a schema records; a schema at the latest
// passes, one behind names what it lacks, one without a readable
// migrations table passes (only its statements can tell).
func TestCheck(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for v, want := range map[uint]string{
		migrated.Latest:     "",
		migrated.Latest - 1: fmt.Sprintf("at version %d without migration %s: ", migrated.Latest-1, migrated.Migration(migrated.Latest)),
		2:                   "at version 2 without migrations 3 (operate) to " + migrated.Migration(migrated.Latest) + ": ",
	} {
		d := testdb.NewAtVersion(t, v)
		err := migrated.Check(ctx, d.Pool, d.Schema, "X")
		if want == "" {
			require.NoError(t, err)
			continue
		}
		require.ErrorIs(t, err, migrated.ErrNotMigrated)
		require.ErrorContains(t, err, "hopper: schema not migrated: schema "+d.Schema+" is "+want)
		require.ErrorContains(t, err, "; run X")
	}
	d := testdb.NewAtVersion(t, 2)
	_, err := d.Pool.Exec(ctx, "DROP TABLE "+migrated.MigrationsTable)
	require.NoError(t, err)
	require.NoError(t, migrated.Check(ctx, d.Pool, d.Schema, "X"), "no record: the statements say it")
}
