package grants_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/grants"
	"github.com/hopperq/hopper/internal/testbed/testdb"
)

// TestScriptQuotesTheNames: the schema and the role, the only names from
// outside, come out as quoted identifiers however they are spelled, so
// that no name can end the statement; each statement ends its line.
func TestScriptQuotesTheNames(t *testing.T) {
	t.Parallel()
	for _, role := range grants.Roles {
		script := grants.Script(role, `a"b; DROP TABLE x`, `r"; --`)
		require.Contains(t, script, `"a""b; DROP TABLE x"`, role)
		require.Contains(t, script, `"r""; --";`+"\n", role)
		require.NotContains(t, strings.ReplaceAll(script, `"a""b; DROP TABLE x"`, ""), "DROP", role)
		require.Equal(t, strings.Count(script, ";\n"), len(statements(t, role)), "%s: one statement a semicolon", role)
	}
	require.Equal(t, `GRANT USAGE ON SCHEMA "s" TO "app"`, statements(t, grants.Worker)[0].SQL("s", "app"))
	_, err := grants.Parse("owner")
	require.ErrorContains(t, err, `unknown kind of role "owner" (producer, worker, reader)`)
	r, err := grants.Parse("reader")
	require.NoError(t, err)
	require.Equal(t, grants.Reader, r)
}

// TestListsCoverTheSchema: every table and view of a migrated schema (its
// partitions aside, reached through their parents) is in the worker's
// list and the reader's, and every sequence in the worker's: a migration
// that adds one without adding it to the lists fails here, before a
// worker fails on it.
func TestListsCoverTheSchema(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d := testdb.New(t)
	rows, err := d.Pool.Query(ctx, `SELECT c.relname::text, c.relkind::text FROM pg_class AS c
		WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'p', 'v', 'S') AND NOT c.relispartition`)
	require.NoError(t, err)
	type rel struct{ Name, Kind string }
	rels, err := pgx.CollectRows(rows, pgx.RowToStructByPos[rel])
	require.NoError(t, err)
	require.NotEmpty(t, rels)
	named := func(role grants.Role) []string {
		var out []string
		for _, s := range statements(t, role) {
			if !s.Revoke {
				out = append(out, s.Objects...)
			}
		}
		return out
	}
	worker, reader := named(grants.Worker), named(grants.Reader)
	for _, r := range rels {
		if slices.Contains(grants.MigratorOnly, r.Name) {
			continue
		}
		require.Contains(t, worker, r.Name, "the worker's list names %s", r.Name)
		if r.Kind != "S" {
			require.Contains(t, reader, r.Name, "the reader's list names %s", r.Name)
		}
	}
}

// TestCheck: a role given exactly a kind's statements passes Check; with
// one privilege taken, Check fails with ErrMissing naming the statement
// that gives it back (narrowed to what is missing on tables and
// sequences), and that statement makes it pass again. A need not asked
// for is not checked.
func TestCheck(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		role   grants.Role
		public bool   // revoke PUBLIC's EXECUTE on the schema's functions first
		take   string // what is revoked after the kind's grants, %s the schema, %r the role
		needs  []grants.Need
		want   []string // the statements the error names, in order; none: Check passes
	}{
		{name: "worker, durable records", role: grants.Worker, take: "REVOKE DELETE, UPDATE ON %s.hopper_job_steps FROM %r",
			want: []string{`GRANT UPDATE, DELETE ON %s.hopper_job_steps TO %r`}},
		{name: "worker, a table whole", role: grants.Worker, take: "REVOKE ALL ON %s.hopper_events, %s.hopper_job_progress FROM %r",
			want: []string{`GRANT SELECT, INSERT, UPDATE, DELETE ON %s.hopper_events, %s.hopper_job_progress TO %r`}},
		{name: "worker, the schema", role: grants.Worker, take: "REVOKE USAGE ON SCHEMA %s FROM %r",
			want: []string{`GRANT USAGE ON SCHEMA %s TO %r`}},
		{name: "worker, a partition function", role: grants.Worker, take: "REVOKE EXECUTE ON FUNCTION %s.hopper_dead_partitions_drop FROM %r",
			want: []string{"GRANT EXECUTE ON FUNCTION %s.hopper_history_partitions_ensure, %s.hopper_history_partitions_drop, %s.hopper_dead_partitions_ensure,\n    %s.hopper_dead_partitions_drop TO %r"}},
		{name: "worker, the functions", role: grants.Worker, public: true, take: "REVOKE EXECUTE ON FUNCTION %s.hopper_enqueue_many FROM %r",
			want: []string{`GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA %s TO %r`}},
		{name: "worker, the functions through PUBLIC", role: grants.Worker, take: "REVOKE EXECUTE ON FUNCTION %s.hopper_enqueue_many FROM %r"},
		{name: "worker without flow control", role: grants.Worker, take: "REVOKE ALL ON %s.hopper_rate_claims FROM %r"},
		{name: "worker with flow control", role: grants.Worker, take: "REVOKE INSERT ON %s.hopper_rate_claims FROM %r", needs: []grants.Need{grants.FlowControl},
			want: []string{`GRANT INSERT ON %s.hopper_rate_claims TO %r`}},
		{name: "worker, the version unread", role: grants.Worker, take: "REVOKE SELECT ON %s.hopper_schema_migrations FROM %r"},
		{name: "reader, the version", role: grants.Reader, take: "REVOKE SELECT ON %s.hopper_schema_migrations FROM %r", needs: []grants.Need{grants.ReadVersion},
			want: []string{`GRANT SELECT ON %s.hopper_schema_migrations TO %r`}},
		{name: "reader, a table", role: grants.Reader, take: "REVOKE SELECT ON %s.hopper_all_jobs FROM %r",
			want: []string{`GRANT SELECT ON %s.hopper_all_jobs TO %r`}},
		{name: "producer, the sequence", role: grants.Producer, take: "REVOKE USAGE ON SEQUENCE %s.hopper_jobs_id_seq FROM %r",
			want: []string{`GRANT USAGE ON SEQUENCE %s.hopper_jobs_id_seq TO %r`}},
		{name: "producer, the functions", role: grants.Producer, public: true, take: "REVOKE EXECUTE ON FUNCTION %s.hopper_enqueue FROM %r",
			want: []string{`GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA %s TO %r`,
				"REVOKE EXECUTE ON FUNCTION %s.hopper_history_partitions_ensure, %s.hopper_history_partitions_drop, %s.hopper_dead_partitions_ensure,\n    %s.hopper_dead_partitions_drop FROM %r"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			d := testdb.New(t)
			schemaID := pgx.Identifier{d.Schema}.Sanitize()
			roleName := d.Schema + "_" + string(c.role)
			roleID := pgx.Identifier{roleName}.Sanitize()
			names := strings.NewReplacer("%s", schemaID, "%r", roleID)
			admin(ctx, t, d, "CREATE ROLE "+roleID+" NOLOGIN")
			t.Cleanup(func() {
				for _, stmt := range []string{"DROP OWNED BY " + roleID, "DROP ROLE " + roleID} {
					_, err := d.Pool.Exec(context.Background(), stmt)
					require.NoError(t, err, stmt)
				}
			})
			if c.public {
				admin(ctx, t, d, "REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA "+schemaID+" FROM PUBLIC")
			}
			for _, s := range statements(t, c.role) {
				admin(ctx, t, d, s.SQL(d.Schema, roleName))
			}
			conn, err := pgx.Connect(ctx, d.URL)
			require.NoError(t, err)
			defer func() { require.NoError(t, conn.Close(context.Background())) }()
			_, err = conn.Exec(ctx, "SET ROLE "+roleID)
			require.NoError(t, err)
			q := db.New(conn)
			all := []grants.Need{grants.FlowControl, grants.ReadVersion}
			require.NoError(t, grants.Check(ctx, q, d.Schema, c.role, all...), "the kind's statements, exactly")

			admin(ctx, t, d, names.Replace(c.take))
			err = grants.Check(ctx, q, d.Schema, c.role, c.needs...)
			if len(c.want) == 0 {
				require.NoError(t, err, "not needed")
				return
			}
			require.ErrorIs(t, err, grants.ErrMissing)
			var want []string
			for _, w := range c.want {
				want = append(want, names.Replace(w))
			}
			require.Contains(t, err.Error(), strings.Join(want, "; ")+"; or hopper grants "+roleName+" --as "+string(c.role)+
				" --schema "+d.Schema+" --apply", "the statements to run")
			require.True(t, strings.HasSuffix(err.Error(), ": hopper: missing grants"), err.Error())
			for _, stmt := range want {
				admin(ctx, t, d, stmt)
			}
			require.NoError(t, grants.Check(ctx, q, d.Schema, c.role, all...), "the statements named give back what was taken")
		})
	}
}

// statements is role's list.
func statements(t *testing.T, role grants.Role) []grants.Statement {
	t.Helper()
	stmts, ok := grants.Of(role)
	require.True(t, ok, role)
	require.NotEmpty(t, stmts, role)
	return slices.Clip(stmts)
}

// admin runs stmt as d's administrator.
func admin(ctx context.Context, t *testing.T, d *testdb.DB, stmt string) {
	t.Helper()
	_, err := d.Pool.Exec(ctx, stmt)
	require.NoError(t, err, stmt)
}
