package schema_test

import (
	"bufio"
	"context"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/schema"
)

// lockModes orders PostgreSQL's table lock modes, weakest first.
var lockModes = []string{"AccessShareLock", "RowShareLock", "RowExclusiveLock", "ShareUpdateExclusiveLock",
	"ShareLock", "ShareRowExclusiveLock", "ExclusiveLock", "AccessExclusiveLock"}

// TestMigrationLocksDocumented: the strongest lock each migration takes
// on each table that existed before it, read from pg_locks inside the
// migration's own transaction, is what docs/upgrading.md's table says.
// A new migration, or one that locks more, fails here until the guide
// says so. HOPPER_PRINT_LOCKS=1 prints the table's rows.
func TestMigrationLocksDocumented(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	d := testdb.NewEmpty(t)
	conn, err := d.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	ups, err := fs.Glob(schema.Files, "*.up.sql")
	require.NoError(t, err)
	slices.Sort(ups)
	got := map[string]string{}
	var rows []string
	for _, name := range ups {
		version := strings.TrimLeft(strings.SplitN(name, "_", 2)[0], "0")
		text, err := fs.ReadFile(schema.Files, name)
		require.NoError(t, err)
		var before []uint32
		require.NoError(t, conn.QueryRow(ctx, `SELECT coalesce(array_agg(oid), '{}') FROM pg_class
			WHERE relnamespace = current_schema()::regnamespace AND relkind IN ('r', 'p')`).Scan(&before))
		tx, err := conn.Begin(ctx)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, string(text))
		require.NoError(t, err, name)
		locks, err := tx.Query(ctx, `SELECT c.relname::text, l.mode FROM pg_locks AS l JOIN pg_class AS c ON c.oid = l.relation
			WHERE l.pid = pg_backend_pid() AND l.locktype = 'relation' AND c.oid = ANY ($1::oid[])`, before)
		require.NoError(t, err)
		strongest := map[string]int{}
		for locks.Next() {
			var rel, mode string
			require.NoError(t, locks.Scan(&rel, &mode))
			if i := slices.Index(lockModes, mode); i > strongest[rel]-1 {
				strongest[rel] = i + 1
			}
		}
		require.NoError(t, locks.Err())
		require.NoError(t, tx.Commit(ctx))
		var parts []string
		for _, rel := range slices.Sorted(maps.Keys(strongest)) {
			parts = append(parts, fmt.Sprintf("%s %s", rel, lockModes[strongest[rel]-1]))
		}
		desc := "none"
		if len(parts) > 0 {
			desc = strings.Join(parts, ", ")
		}
		got[version] = desc
		rows = append(rows, fmt.Sprintf("| %s | %s |", version, desc))
	}
	if os.Getenv("HOPPER_PRINT_LOCKS") != "" {
		t.Log("\n" + strings.Join(rows, "\n"))
	}
	documented := documentedLocks(t)
	for _, name := range ups {
		version := strings.TrimLeft(strings.SplitN(name, "_", 2)[0], "0")
		require.Equal(t, got[version], documented[version], "docs/upgrading.md, migration %s (%s): the locks it takes", version, name)
	}
}

// documentedLocks reads docs/upgrading.md's lock table: rows of "| N |
// locks |" whose first cell is a number.
func documentedLocks(t *testing.T) map[string]string {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "docs", "upgrading.md"))
	require.NoError(t, err)
	defer f.Close()
	out := map[string]string{}
	s := bufio.NewScanner(f)
	for s.Scan() {
		cells := strings.Split(s.Text(), "|")
		if len(cells) < 4 {
			continue
		}
		v := strings.TrimSpace(cells[1])
		if v == "" || strings.Trim(v, "0123456789") != "" {
			continue
		}
		out[v] = strings.Trim(strings.TrimSpace(cells[len(cells)-2]), "`")
	}
	require.NoError(t, s.Err())
	return out
}
