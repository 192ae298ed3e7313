package sqlbatch_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/internal/sqlbatch"
	"github.com/hopperq/hopper/internal/testbed/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// Around's batch is one transaction, the statement's rows report what
// comes after it, and what comes after runs only after a statement that
// succeeded.
func TestAround(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tdb := testdb.New(t)
	conn, err := pgx.Connect(ctx, tdb.URL)
	require.NoError(t, err)
	defer func() { _ = conn.Close(ctx) }()
	_, err = conn.Exec(ctx, "CREATE TEMP TABLE seen (n integer)")
	require.NoError(t, err)

	insert := sqlbatch.Statement{SQL: "INSERT INTO seen VALUES ($1)", Args: []any{1}}
	count := "SELECT count(*) FROM seen"
	for _, tc := range []struct {
		name    string
		sql     string
		after   []sqlbatch.Statement
		wantErr string // the rows' error
		kept    int    // rows of seen after the batch
	}{
		{name: "all succeed", sql: count, after: []sqlbatch.Statement{{SQL: "INSERT INTO seen VALUES (2)"}}, kept: 2},
		{name: "nothing after", sql: count, kept: 1},
		{name: "after fails: all rolled back", sql: count, after: []sqlbatch.Statement{{SQL: "SELECT 1/0"}},
			wantErr: "division by zero"},
		{name: "statement fails: after skipped", sql: "SELECT 1/0", after: []sqlbatch.Statement{{SQL: "INSERT INTO seen VALUES (2)"}},
			wantErr: "division by zero"},
	} {
		_, err := conn.Exec(ctx, "TRUNCATE seen")
		require.NoError(t, err, tc.name)
		rows, err := sqlbatch.Around(ctx, conn, insert, tc.sql, nil, tc.after...)
		require.NoError(t, err, tc.name)
		var got []int64
		for rows.Next() {
			var n int64
			require.NoError(t, rows.Scan(&n), tc.name)
			got = append(got, n)
		}
		if tc.wantErr != "" {
			require.ErrorContains(t, rows.Err(), tc.wantErr, tc.name)
		} else {
			require.NoError(t, rows.Err(), tc.name)
			require.Equal(t, []int64{1}, got, "%s: the statement sees what ran before it", tc.name)
		}
		rows.Close() // again: a no-op
		var kept int
		require.NoError(t, conn.QueryRow(ctx, count).Scan(&kept), tc.name)
		require.Equal(t, tc.kept, kept, tc.name)
	}

	// a statement before that fails: no rows at all
	_, err = sqlbatch.Around(ctx, conn, sqlbatch.Statement{SQL: "SELECT 1/0"}, count, nil)
	require.ErrorContains(t, err, "division by zero")
	var one int
	require.NoError(t, conn.QueryRow(ctx, "SELECT 1").Scan(&one), "the connection is usable after")
}
