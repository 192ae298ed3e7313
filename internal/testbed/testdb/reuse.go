package testdb

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hopperq/hopper/internal/buildinfo"
	"github.com/hopperq/hopper/internal/migrated"
	"github.com/hopperq/hopper/internal/testbed/freshschema"
	"github.com/hopperq/hopper/schema"
)

// Migrating a schema from nothing runs every migration, each in a
// transaction of its own with golang-migrate's bookkeeping: about 200 ms,
// for each of the hundreds of tests that start from a migrated schema. A
// schema a test is done with is given back instead, and the next test of
// the binary takes it once it is as a fresh migrate up leaves it:
//
//   - renamed, so that nothing the last test left connected (a child
//     process, a stray pool) can reach the new test's tables: its
//     search_path names a schema that is gone;
//   - its tables emptied (TRUNCATE of those that hold any page: most
//     tests write to a few of them, and a TRUNCATE of an untouched table
//     costs as much as of a written one), every sequence used restarted
//     (ids start at 1 again), and the tables' statistics counters reset;
//   - and only when its catalog (relations, columns, options, grants,
//     functions and their settings, triggers, constraints, statistics, the
//     migrations' version) matches a freshly migrated schema's. A test that
//     migrated down, altered a table, granted, analyzed or replaced a
//     function leaves a schema that does not match, and it is dropped as
//     before.
//
// HOPPER_TEST_FRESH_SCHEMAS=1 turns reuse off (every test migrates from
// nothing), to tell a fault of the reuse from one of the test.
var spare struct {
	sync.Mutex
	names []string // migrated schemas ready for another test
	fresh string   // the catalog fingerprint of a freshly migrated schema
	// Counts, printed when the binary ends: schemas migrated from nothing,
	// taken again, and given back but dropped (changed by their test).
	migrated, reused, dropped int
}

func reuseOff() bool { return os.Getenv("HOPPER_TEST_FRESH_SCHEMAS") != "" }

// takeSpare returns a migrated schema another test gave back, or "".
func takeSpare() string {
	spare.Lock()
	defer spare.Unlock()
	if n := len(spare.names); n > 0 {
		name := spare.names[n-1]
		spare.names = spare.names[:n-1]
		spare.reused++
		return name
	}
	return ""
}

// migrateFresh creates a schema, migrates it and, the first time, records
// the fingerprint every reused schema must match.
func migrateFresh(ctx context.Context, dsn string) (string, error) {
	name, err := freshschema.Create(ctx, dsn, "hopper_test_")
	if err != nil {
		return "", err
	}
	err = func() error {
		pool, err := newPool(ctx, WithSearchPath(dsn, name))
		if err != nil {
			return err
		}
		defer pool.Close()
		if err := schema.Up(ctx, pool); err != nil {
			return fmt.Errorf("migrate %s: %w", name, err)
		}
		spare.Lock()
		defer spare.Unlock()
		spare.migrated++
		if spare.fresh == "" && !reuseOff() {
			fp, err := fingerprint(ctx, pool, name)
			if err != nil {
				return err
			}
			spare.fresh = fp
		}
		return nil
	}()
	if err != nil {
		_ = freshschema.Drop(context.WithoutCancel(ctx), dsn, name)
		return "", err
	}
	return name, nil
}

// giveBack readies schema name for another test, or drops it when it is
// not as a fresh migrate up leaves it (or reuse is off).
func giveBack(ctx context.Context, dsn, name string) error {
	spare.Lock()
	fresh := spare.fresh
	spare.Unlock()
	if reuseOff() || fresh == "" {
		return freshschema.Drop(ctx, dsn, name)
	}
	renamed, err := reset(ctx, dsn, name, fresh)
	if err != nil || renamed == "" {
		// Not reusable (or the reset failed): the schema goes, whatever
		// its name now is.
		spare.Lock()
		spare.dropped++
		spare.Unlock()
		if dropErr := freshschema.Drop(ctx, dsn, name); dropErr != nil {
			return dropErr
		}
		return nil
	}
	spare.Lock()
	spare.names = append(spare.names, renamed)
	spare.Unlock()
	return nil
}

// DropSpares drops the migrated schemas kept for reuse: Main calls it
// when the tests end, and so must a TestMain of its own that uses New.
func DropSpares() {
	if serverErr == nil && serverDSN != "" {
		dropSpares(serverDSN)
	}
}

// dropSpares drops the schemas left for reuse when the binary ends.
func dropSpares(dsn string) {
	spare.Lock()
	names := spare.names
	spare.names = nil
	if spare.migrated > 0 {
		fmt.Fprintf(os.Stderr, "testdb: migrated schemas: %d migrated from nothing, %d reused, %d dropped as changed by their test\n",
			spare.migrated, spare.reused, spare.dropped)
	}
	spare.Unlock()
	for _, name := range names {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if err := freshschema.Drop(ctx, dsn, name); err != nil {
			fmt.Fprintf(os.Stderr, "testdb: %v\n", err)
		}
		cancel()
	}
}

// reset renames schema name, empties its tables and checks its
// fingerprint against fresh, in one transaction: it returns the new name,
// or "" (and changes nothing) when the schema is not fit for reuse.
func reset(ctx context.Context, dsn, name, fresh string) (string, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return "", err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	// The migrations' record (a test may have marked it dirty); the
	// catalog is compared once the schema is renamed and emptied, in the
	// transaction that does it.
	version, dirty, ok, err := migrated.Applied(ctx, conn, name)
	if err != nil || !ok || dirty || version != int64(schema.Latest()) {
		return "", err
	}
	// The record of which build applied each migration, as this binary's
	// migrate up leaves it: the reset keeps that table, so a test that
	// wrote to it leaves a schema that goes.
	build := buildinfo.Read()
	var asMigrated bool
	if err := conn.QueryRow(ctx, `SELECT count(*) = $1 AND coalesce(bool_and(hopper_version = $2 AND program = $3 AND revision = $4), false)
		FROM `+pgx.Identifier{name, "hopper_migration_builds"}.Sanitize(),
		len(schema.Versions()), build.Version, build.Program, build.Revision).Scan(&asMigrated); err != nil || !asMigrated {
		return "", err
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	renamed := "hopper_test_" + hex.EncodeToString(b)
	old, ident := pgx.Identifier{name}.Sanitize(), pgx.Identifier{renamed}.Sanitize()
	tx, err := conn.Begin(ctx)
	if err != nil {
		return "", err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	// The tables written to (a page or more: live or dead rows) and the
	// sequences used, read before the rename, under the old name. The
	// migrations' version and the builds that applied them stay, as a
	// freshly migrated schema has them.
	var tables, sequences string
	if err := tx.QueryRow(ctx, `SELECT
		  (SELECT coalesce(string_agg(format('%I.%I', $2::text, c.relname), ', ' ORDER BY c.relname), '')
		   FROM pg_class AS c WHERE c.relnamespace = $1::text::regnamespace AND c.relkind = 'r' AND c.relname <> ALL ($3::text[])
		     AND pg_relation_size(c.oid) > 0),
		  (SELECT coalesce(string_agg(format('ALTER SEQUENCE %I.%I RESTART;', $2::text, s.sequencename), ' ' ORDER BY s.sequencename), '')
		   FROM pg_sequences AS s WHERE s.schemaname = $1::text AND s.last_value IS NOT NULL)`,
		name, renamed, []string{schema.MigrationsTable, "hopper_migration_builds"}).Scan(&tables, &sequences); err != nil {
		return "", err
	}
	// DDL takes no bind parameters: the names are the test bed's own, quoted.
	stmts := []string{
		"ALTER SCHEMA " + old + " RENAME TO " + ident,
		// The functions that pin their search_path to the schema (the SQL
		// API, the triggers) follow it to its new name.
		`DO $$ DECLARE f regprocedure; BEGIN
			FOR f IN SELECT p.oid::regprocedure FROM pg_proc AS p
			         WHERE p.pronamespace = ` + quoteLiteral(renamed) + `::regnamespace
			           AND EXISTS (SELECT FROM unnest(p.proconfig) AS c WHERE c LIKE 'search_path=%') LOOP
				EXECUTE format('ALTER FUNCTION %s SET search_path = %I, pg_temp', f, ` + quoteLiteral(renamed) + `);
			END LOOP;
		END $$`,
		`SELECT count(pg_stat_reset_single_table_counters(c.oid)) FROM pg_class AS c
			WHERE c.relnamespace = ` + quoteLiteral(renamed) + `::regnamespace AND c.relkind = 'r'`,
	}
	if tables != "" {
		stmts = append(stmts, "TRUNCATE "+tables)
	}
	if sequences != "" {
		stmts = append(stmts, sequences)
	}
	for _, stmt := range stmts {
		if _, err := tx.Exec(ctx, stmt); err != nil {
			return "", fmt.Errorf("reset %s: %w", name, err)
		}
	}
	if fp, err := fingerprint(ctx, tx, renamed); err != nil || fp != fresh {
		return "", err
	}
	if err := tx.Commit(ctx); err != nil {
		return "", err
	}
	return renamed, nil
}

// quoteLiteral quotes s as an SQL string literal.
func quoteLiteral(s string) string {
	out := []byte{'\''}
	for i := 0; i < len(s); i++ {
		if s[i] == '\'' {
			out = append(out, '\'')
		}
		out = append(out, s[i])
	}
	return string(append(out, '\''))
}

// querier is what fingerprint reads through: a pool, a connection or a
// transaction.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// fingerprint digests what a test could change in schema name's catalog,
// with the schema's own name left out, and whether any table holds rows
// or statistics.
func fingerprint(ctx context.Context, q querier, name string) (string, error) {
	var fp string
	err := q.QueryRow(ctx, `SELECT md5(concat_ws('|',
			(SELECT coalesce(nspacl::text, '') FROM pg_namespace WHERE oid = $1::regnamespace),
			(SELECT string_agg(concat_ws(':', c.relname, c.relkind, c.reloptions::text, c.relacl::text, c.relrowsecurity,
			                             c.relpersistence, c.relhastriggers, c.relreplident), ',' ORDER BY c.relname)
			 FROM pg_class AS c WHERE c.relnamespace = $1::regnamespace),
			(SELECT string_agg(concat_ws(':', c.relname, a.attnum, a.attname, a.atttypid, a.attnotnull, a.atthasdef, a.attisdropped), ','
			                   ORDER BY c.relname, a.attnum)
			 FROM pg_attribute AS a JOIN pg_class AS c ON c.oid = a.attrelid
			 WHERE c.relnamespace = $1::regnamespace AND a.attnum > 0),
			(SELECT string_agg(concat_ws(':', p.proname, pg_get_function_identity_arguments(p.oid), md5(p.prosrc), p.proacl::text,
			                             replace(p.proconfig::text, $1::text, '$schema'),
			                             p.provolatile, p.prosecdef), ','
			                   ORDER BY p.proname, pg_get_function_identity_arguments(p.oid))
			 FROM pg_proc AS p WHERE p.pronamespace = $1::regnamespace),
			(SELECT string_agg(concat_ws(':', c.relname, t.tgname, t.tgenabled, f.proname), ',' ORDER BY c.relname, t.tgname)
			 FROM pg_trigger AS t JOIN pg_class AS c ON c.oid = t.tgrelid JOIN pg_proc AS f ON f.oid = t.tgfoid
			 WHERE c.relnamespace = $1::regnamespace),
			(SELECT string_agg(concat_ws(':', k.conname, k.convalidated, md5(pg_get_constraintdef(k.oid))), ',' ORDER BY k.conname)
			 FROM pg_constraint AS k WHERE k.connamespace = $1::regnamespace),
			(SELECT count(*) FROM pg_statistic AS s JOIN pg_class AS c ON c.oid = s.starelid WHERE c.relnamespace = $1::regnamespace),
			(SELECT count(*) FROM pg_default_acl AS d WHERE d.defaclnamespace = $1::regnamespace),
			(SELECT string_agg(concat_ws(':', c.relname, q.seqstart, q.seqincrement, q.seqmin, q.seqmax, q.seqcache, q.seqcycle), ',' ORDER BY c.relname)
			 FROM pg_sequence AS q JOIN pg_class AS c ON c.oid = q.seqrelid WHERE c.relnamespace = $1::regnamespace)
		))`, name).Scan(&fp)
	if err != nil {
		return "", fmt.Errorf("fingerprint %s: %w", name, err)
	}
	return fp, nil
}
