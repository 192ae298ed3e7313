package schema_test

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/schema"
)

// withoutReplicaIdentity lists the tables of the current schema that hold
// rows (partitions included, partitioned parents not: they hold none)
// and have no replica identity logical replication can use: neither FULL
// nor an index (the primary key by default, or one named by USING INDEX).
const withoutReplicaIdentity = `
	SELECT c.relname::text FROM pg_class AS c
	WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'r'
	  AND NOT (c.relreplident = 'f'
	           OR (c.relreplident = 'd' AND EXISTS (SELECT FROM pg_index AS i WHERE i.indrelid = c.oid AND i.indisprimary))
	           OR (c.relreplident = 'i' AND EXISTS (SELECT FROM pg_index AS i WHERE i.indrelid = c.oid AND i.indisreplident)))
	ORDER BY 1`

// TestEveryTableHasAReplicaIdentity: at the latest version every table of
// the schema has a replica identity, the partitions that the history's
// and the dead jobs' _ensure functions create included, so that logical
// replication carries every change (Citus's online schema move; a
// publication). Migration 32 gave hopper_rate_claims its identity: below
// it, a publication of the table makes PostgreSQL refuse the deletes that
// every rate-limited claim makes; at 32 they go through.
func TestEveryTableHasAReplicaIdentity(t *testing.T) {
	ctx, d := setup(t)
	mg, err := schema.NewMigrator(ctx, d.Pool)
	require.NoError(t, err)
	defer func() { require.NoError(t, mg.Close()) }()
	require.NoError(t, mg.Up(ctx))

	var made int
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT hopper_history_partitions_ensure('1 hour', '2 hours')
		+ hopper_dead_partitions_ensure('1 hour', '2 hours')`).Scan(&made))
	require.GreaterOrEqual(t, made, 4, "partitions of both tables were made")
	missing := func() []string {
		rows, err := d.Pool.Query(ctx, withoutReplicaIdentity)
		require.NoError(t, err)
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		return names
	}
	require.Empty(t, missing(), "tables without a replica identity")

	// A publication of the rate claims' log: with its identity, the
	// log's deletes go through; without it (31), PostgreSQL refuses them.
	pub := pgx.Identifier{"hopper_ri_" + d.Schema}.Sanitize()
	_, err = d.Pool.Exec(ctx, "CREATE PUBLICATION "+pub+" FOR TABLE hopper_rate_claims")
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = d.Pool.Exec(ctx, "DROP PUBLICATION IF EXISTS "+pub) })
	prune := `DELETE FROM hopper_rate_claims WHERE claimed_at < now() - interval '1 hour'`
	_, err = d.Pool.Exec(ctx, prune)
	require.NoError(t, err, "a publication takes the log's deletes at 32")

	downTo(ctx, t, mg, 31)
	require.Equal(t, []string{"hopper_rate_claims"}, missing(), "below 32 the rate claims' log has no identity")
	_, err = d.Pool.Exec(ctx, prune)
	require.ErrorContains(t, err, "does not have a replica identity", "at 31 the publication refuses the log's deletes")
	require.NoError(t, mg.Up(ctx))
	require.Empty(t, missing())
}
