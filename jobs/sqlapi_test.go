package jobs_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
)

// sqlAPICase is one job given to Go (EnqueueRaw: Kind.Enqueue of a raw
// payload) and to the SQL API (hopper_enqueue) alike. A nil option is
// left out: Go's default on one side, the SQL parameter's on the other
// (or NULL, when a test passes every parameter).
type sqlAPICase struct {
	name           string
	kind           string
	version        int // 0: left out (1)
	payload        string
	queue          *string
	priority       *int
	runAt          *time.Time
	delay          *time.Duration
	uniqueKey      *string
	maxAttempts    *int
	meta           jobs.Meta
	concurrencyKey *string
	// refused is the error's text after "enqueue KIND: ", "" for a job
	// both accept
	refused string
}

func ptr[T any](v T) *T { return &v }

func (c sqlAPICase) options() []jobs.EnqueueOption {
	var opts []jobs.EnqueueOption
	if c.queue != nil {
		opts = append(opts, jobs.Queue(*c.queue))
	}
	if c.priority != nil {
		opts = append(opts, jobs.Priority(*c.priority))
	}
	if c.runAt != nil {
		opts = append(opts, jobs.RunAt(*c.runAt))
	}
	if c.delay != nil {
		opts = append(opts, jobs.Delay(*c.delay))
	}
	if c.uniqueKey != nil {
		opts = append(opts, jobs.UniqueKey(*c.uniqueKey))
	}
	if c.maxAttempts != nil {
		opts = append(opts, jobs.MaxAttempts(*c.maxAttempts))
	}
	if c.meta != nil {
		opts = append(opts, jobs.Metadata(c.meta))
	}
	if c.concurrencyKey != nil {
		opts = append(opts, jobs.ConcurrencyKey(*c.concurrencyKey))
	}
	return opts
}

func (c sqlAPICase) goVersion() int {
	if c.version == 0 {
		return 1
	}
	return c.version
}

// sqlArgs are the case's named parameters and their values; nulls passes
// every option, NULL when the case leaves it out.
func (c sqlAPICase) sqlArgs(nulls bool) (names []string, values []any) {
	add := func(name string, set bool, v any) {
		if set || nulls {
			names = append(names, name)
			if !set {
				v = nil
			}
			values = append(values, v)
		}
	}
	deref := func(p any) any {
		switch p := p.(type) {
		case *string:
			if p != nil {
				return *p
			}
		case *int:
			if p != nil {
				return *p
			}
		case *time.Time:
			if p != nil {
				return *p
			}
		case *time.Duration:
			if p != nil {
				return *p
			}
		}
		return nil
	}
	add("kind", true, c.kind)
	add("payload", true, c.payload)
	add("version", c.version != 0, c.version)
	add("queue", c.queue != nil, deref(c.queue))
	add("priority", c.priority != nil, deref(c.priority))
	add("run_at", c.runAt != nil, deref(c.runAt))
	add("delay", c.delay != nil, deref(c.delay))
	add("unique_key", c.uniqueKey != nil, deref(c.uniqueKey))
	add("max_attempts", c.maxAttempts != nil, deref(c.maxAttempts))
	var meta any
	if c.meta != nil {
		raw, _ := json.Marshal(c.meta)
		meta = string(raw)
	}
	add("meta", c.meta != nil, meta)
	add("concurrency_key", c.concurrencyKey != nil, deref(c.concurrencyKey))
	return names, values
}

var sqlAPITypes = map[string]string{
	"kind": "text", "payload": "jsonb", "version": "integer", "queue": "text", "priority": "integer",
	"run_at": "timestamptz", "delay": "interval", "unique_key": "text", "max_attempts": "integer",
	"meta": "jsonb", "concurrency_key": "text",
}

// enqueueSQL calls hopper_enqueue with the case's named parameters.
func (c sqlAPICase) enqueueSQL(ctx context.Context, q jobs.DBTX, nulls bool) (id *int64, inserted bool, err error) {
	names, values := c.sqlArgs(nulls)
	args := make([]string, len(names))
	for i, n := range names {
		args[i] = fmt.Sprintf("%s => $%d::%s", n, i+1, sqlAPITypes[n])
	}
	err = q.QueryRow(ctx, "SELECT id, inserted FROM hopper_enqueue("+strings.Join(args, ", ")+")", values...).Scan(&id, &inserted)
	return id, inserted, err
}

// toJSON is the case as a job of hopper_enqueue_many's array.
func (c sqlAPICase) toJSON() map[string]any {
	names, values := c.sqlArgs(false)
	job := map[string]any{}
	for i, n := range names {
		v := values[i]
		switch n {
		case "payload", "meta":
			v = json.RawMessage(v.(string))
		case "delay":
			v = fmt.Sprintf("%d microseconds", v.(time.Duration).Microseconds())
		}
		job[n] = v
	}
	return job
}

// storedJob is every column of a stored job but its id and created_at, as
// JSON; run_at as its distance from created_at (the enqueue's now()),
// unless absolute.
func storedJob(t *testing.T, ctx context.Context, q jobs.DBTX, id int64, absolute bool) map[string]any {
	t.Helper()
	var row map[string]any
	require.NoError(t, q.QueryRow(ctx, `
		SELECT to_jsonb(j) - 'id' - 'created_at' - 'run_at'
		       || jsonb_build_object('run_at', CASE WHEN $2 THEN j.run_at::text ELSE (j.run_at - j.created_at)::text END)
		FROM hopper_jobs AS j WHERE j.id = $1`, id, absolute).Scan(&row))
	return row
}

func sqlAPICases() []sqlAPICase {
	later := time.Date(2100, 1, 2, 3, 4, 5, 678901000, time.UTC)
	past := time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)
	long := func(n int) string { return strings.Repeat("é", n) }
	return []sqlAPICase{
		{name: "plain", kind: "note", payload: `{"text": "a"}`},
		{name: "every option", kind: "note", version: 3, payload: `{"text": "b", "n": [1, 2.5, null]}`,
			queue: ptr("mail"), priority: ptr(7), maxAttempts: ptr(3), uniqueKey: ptr("u-1"),
			meta: jobs.Meta{"tenant": "acme", "request": "r-1"}, concurrencyKey: ptr("c-1")},
		{name: "the same unique key: a duplicate", kind: "note", payload: `{"text": "c"}`, uniqueKey: ptr("u-1")},
		{name: "a payload that is not an object", kind: "note", payload: `"just text"`},
		{name: "delay", kind: "note", payload: `{}`, delay: ptr(time.Hour + 1500*time.Microsecond)},
		{name: "zero delay", kind: "note", payload: `{}`, delay: ptr(time.Duration(0))},
		{name: "run at later", kind: "note", payload: `{}`, runAt: ptr(later)},
		{name: "run at in the past", kind: "note", payload: `{}`, runAt: ptr(past)},
		{name: "run at and a longer delay", kind: "note", payload: `{}`, runAt: ptr(past), delay: ptr(2 * time.Hour)},
		{name: "run at the last time Go reads back", kind: "note", payload: `{}`, runAt: ptr(time.Date(9998, 12, 31, 23, 59, 59, 999999000, time.UTC))},
		{name: "bounds", kind: long(128), payload: `{}`, queue: ptr(long(128)), priority: ptr(9), maxAttempts: ptr(1 << 30),
			uniqueKey: ptr(long(512)), concurrencyKey: ptr(long(255))},
		{name: "priority 0, one attempt", kind: "note", payload: `{}`, priority: ptr(0), maxAttempts: ptr(1)},
		{name: "empty meta is none", kind: "note", payload: `{}`, meta: jobs.Meta{}},
		{name: "meta at its limit", kind: "note", payload: `{}`, meta: jobs.Meta{"k": strings.Repeat("v", 8182)}},
		{name: "meta with escapes at its limit", kind: "note", payload: `{}`, meta: jobs.Meta{"k": "<&>" + strings.Repeat("v", 8164)}},
		{name: "meta with a line separator at its limit", kind: "note", payload: `{}`, meta: jobs.Meta{"k": "\u2028" + strings.Repeat("v", 8176)}},
		{name: "payload at its limit", kind: "note", payload: `{"a": "` + strings.Repeat("x", 1<<20-8) + `"}`},
		{name: "payload with escapes at its limit", kind: "note", payload: `{"a": ["<", 1, {"b": "` + strings.Repeat("x", 1<<20-27) + `"}]}`},

		{name: "empty kind", kind: "", payload: `{}`, refused: `hopper: invalid job kind definition: kind name "" is empty`},
		{name: "long kind", kind: long(129), payload: `{}`, refused: `hopper: invalid job kind definition: kind name "` + long(129) + `" is 129 characters long, over the limit of 128`},
		{name: "version -1", kind: "note", version: -1, payload: `{}`, refused: "hopper: invalid job kind definition: version -1 is outside 1 to 2147483647"},
		{name: "empty queue", kind: "note", payload: `{}`, queue: ptr(""), refused: `hopper: invalid queue name: queue name "" is empty`},
		{name: "long queue", kind: "note", payload: `{}`, queue: ptr(long(129)), refused: `hopper: invalid queue name: queue name "` + long(129) + `" is 129 characters long, over the limit of 128`},
		{name: "meta with an empty key", kind: "note", payload: `{}`, meta: jobs.Meta{"": "x"}, refused: "hopper: invalid metadata: an empty key"},
		{name: "meta over its limit", kind: "note", payload: `{}`, meta: jobs.Meta{"k": strings.Repeat("v", 8183)}, refused: "hopper: invalid metadata: 8193 bytes as stored, over the limit of 8192"},
		{name: "meta with escapes over its limit", kind: "note", payload: `{}`, meta: jobs.Meta{"k": "<&>" + strings.Repeat("v", 8165)}, refused: "hopper: invalid metadata: 8193 bytes as stored, over the limit of 8192"},
		{name: "meta with a line separator over its limit", kind: "note", payload: `{}`, meta: jobs.Meta{"k": "\u2028" + strings.Repeat("v", 8177)}, refused: "hopper: invalid metadata: 8193 bytes as stored, over the limit of 8192"},
		{name: "priority -1", kind: "note", payload: `{}`, priority: ptr(-1), refused: "hopper: invalid priority: -1 is outside 0 (first) to 9 (last)"},
		{name: "priority 10", kind: "note", payload: `{}`, priority: ptr(10), refused: "hopper: invalid priority: 10 is outside 0 (first) to 9 (last)"},
		{name: "no attempts", kind: "note", payload: `{}`, maxAttempts: ptr(0), refused: "hopper: invalid max attempts: 0 (must be 1 or more)"},
		{name: "too many attempts", kind: "note", payload: `{}`, maxAttempts: ptr(1<<30 + 1), refused: "hopper: invalid max attempts: 1073741825 (must be 1 or more)"},
		{name: "negative delay", kind: "note", payload: `{}`, delay: ptr(-90 * time.Second), refused: "hopper: invalid run time: negative delay -1m30s"},
		{name: "negative delay under a second", kind: "note", payload: `{}`, delay: ptr(-1500 * time.Microsecond), refused: "hopper: invalid run time: negative delay -1.5ms"},
		{name: "run at in the year 9999", kind: "note", payload: `{}`, runAt: ptr(time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)),
			refused: "hopper: invalid run time: run_at is in the year 9999 or later"},
		{name: "run at in the year 9999 of a zone behind UTC", kind: "note", payload: `{}`, runAt: ptr(time.Date(9998, 12, 31, 20, 0, 0, 0, time.FixedZone("-5", -5*3600))),
			refused: "hopper: invalid run time: run_at is in the year 9999 or later"},
		{name: "empty concurrency key", kind: "note", payload: `{}`, concurrencyKey: ptr(""), refused: "hopper: invalid concurrency key: empty (leave the option out for no key)"},
		{name: "long concurrency key", kind: "note", payload: `{}`, concurrencyKey: ptr(long(256)), refused: "hopper: invalid concurrency key: 256 characters long, over the limit of 255"},
		{name: "empty unique key", kind: "note", payload: `{}`, uniqueKey: ptr(""), refused: "hopper: invalid unique key: empty (leave the option out for no key)"},
		{name: "long unique key", kind: "note", payload: `{}`, uniqueKey: ptr(long(513)), refused: "hopper: invalid unique key: 513 characters long, over the limit of 512"},
		{name: "payload over its limit", kind: "note", payload: `{"a": "` + strings.Repeat("x", 1<<20-7) + `"}`, refused: "hopper: payload too large: 1048577 bytes encoded, over the limit of 1048576"},
		{name: "payload with escapes over its limit", kind: "note", payload: `{"a": ["<", 1, {"b": "` + strings.Repeat("x", 1<<20-26) + `"}]}`, refused: "hopper: payload too large: 1048577 bytes encoded, over the limit of 1048576"},
		{name: "two faults: the first checked is reported", kind: "note", payload: `{}`, queue: ptr(""), priority: ptr(10), uniqueKey: ptr(""),
			refused: `hopper: invalid queue name: queue name "" is empty`},
	}
}

// goWords is the text Go's refusal of c has.
func (c sqlAPICase) goWords(prefix string) string {
	if strings.Contains(c.refused, "kind name") {
		return "enqueue: " + c.refused // EnqueueRaw's words: no kind to name
	}
	return prefix + c.refused
}

// TestSQLAPIAgreesWithGo: Go's typed layer and the SQL functions agree. The
// same table of good and bad jobs goes through Go's Kind.Enqueue (as
// EnqueueRaw) into one schema and through hopper_enqueue into another: a
// job one accepts the other accepts, stored alike in every column but id
// and created_at, with the same answer for a duplicate unique key; a job
// one refuses the other refuses, with the same words (SQLSTATE 22023 and a
// hint on the SQL side). Then with every option passed as NULL (the
// defaults), and as one batch (EnqueueBatch and hopper_enqueue_many).
func TestSQLAPIAgreesWithGo(t *testing.T) {
	b := setup(t)
	ctx := b.Ctx
	for _, nulls := range []bool{false, true} {
		goDB, sqlDB := testdb.New(t), testdb.New(t)
		ids := map[string][2]int64{} // unique key → the ids Go and SQL gave
		for _, c := range sqlAPICases() {
			what := fmt.Sprintf("%s (NULLs for defaults: %v)", c.name, nulls)
			goRes, goErr := jobs.EnqueueRaw(ctx, goDB.Pool, c.kind, c.goVersion(), json.RawMessage(c.payload), c.options()...)
			sqlID, inserted, sqlErr := c.enqueueSQL(ctx, sqlDB.Pool, nulls)
			if c.refused != "" {
				require.EqualError(t, goErr, c.goWords("enqueue "+c.kind+": "), what)
				var pgErr *pgconn.PgError
				require.ErrorAs(t, sqlErr, &pgErr, what)
				require.Equal(t, goErr.Error(), pgErr.Message, what)
				require.Equal(t, "22023", pgErr.Code, what)
				require.NotEmpty(t, pgErr.Hint, what)
				continue
			}
			require.NoError(t, goErr, what)
			require.NoError(t, sqlErr, what)
			require.NotNil(t, sqlID, what)
			require.Equal(t, goRes.Duplicate, !inserted, what)
			if c.uniqueKey != nil {
				if first, ok := ids[*c.uniqueKey]; ok {
					require.True(t, goRes.Duplicate, what)
					require.Equal(t, first, [2]int64{goRes.ID, *sqlID}, what+": the holder's ids")
					continue
				}
				ids[*c.uniqueKey] = [2]int64{goRes.ID, *sqlID}
			}
			absolute := c.runAt != nil && c.runAt.After(time.Now())
			require.Equal(t, storedJob(t, ctx, goDB.Pool, goRes.ID, absolute), storedJob(t, ctx, sqlDB.Pool, *sqlID, absolute), what)
		}
	}

	// One batch of the good jobs, and batches of a good job and a bad one.
	goDB, sqlDB := testdb.New(t), testdb.New(t)
	var good []sqlAPICase
	for _, c := range sqlAPICases() {
		if c.refused == "" {
			good = append(good, c)
		}
	}
	entry := func(c sqlAPICase) jobs.Entry {
		opts := []jobs.DefineOption{jobs.Version(c.goVersion())}
		for v := 1; v < c.goVersion(); v++ {
			opts = append(opts, jobs.Upgrade(v, func(raw json.RawMessage) (json.RawMessage, error) { return raw, nil }))
		}
		k, err := jobs.Define[json.RawMessage](c.kind, opts...)
		require.NoError(t, err, c.name)
		return k.Entry(json.RawMessage(c.payload), c.options()...)
	}
	batch := func(cs []sqlAPICase) (goRes jobs.BatchResult, goErr error, sqlRows []sqlAPIRow, sqlErr error) {
		entries := make([]jobs.Entry, len(cs))
		array := make([]map[string]any, len(cs))
		for i, c := range cs {
			entries[i] = entry(c)
			array[i] = c.toJSON()
		}
		goRes, goErr = jobs.EnqueueBatch(ctx, goDB.Pool, entries)
		raw, err := json.Marshal(array)
		require.NoError(t, err)
		rows, err := sqlDB.Pool.Query(ctx, "SELECT id, inserted FROM hopper_enqueue_many($1::jsonb)", string(raw))
		require.NoError(t, err)
		sqlRows, sqlErr = pgx.CollectRows(rows, pgx.RowToStructByPos[sqlAPIRow])
		return goRes, goErr, sqlRows, sqlErr
	}
	// With unique keys (one INSERT … ON CONFLICT on both sides), and
	// without (Go's plain INSERT, the SQL function's too).
	var keyless []sqlAPICase
	for _, c := range good {
		if c.uniqueKey == nil {
			keyless = append(keyless, c)
		}
	}
	for n, cs := range [][]sqlAPICase{good, keyless} {
		goRes, goErr, sqlRows, sqlErr := batch(cs)
		require.NoError(t, goErr)
		require.NoError(t, sqlErr)
		require.Len(t, sqlRows, len(cs))
		require.Len(t, goRes.Results, len(cs))
		for i, c := range cs {
			require.Equal(t, goRes.Results[i].Duplicate, !sqlRows[i].Inserted, c.name)
			require.NotNil(t, sqlRows[i].ID, c.name)
			if i > 0 && sqlRows[i].Inserted && sqlRows[i-1].Inserted {
				require.Greater(t, *sqlRows[i].ID, *sqlRows[i-1].ID, "a batch's ids in its order")
			}
			if goRes.Results[i].Duplicate {
				continue
			}
			absolute := c.runAt != nil && c.runAt.After(time.Now())
			goJob, sqlJob := storedJob(t, ctx, goDB.Pool, goRes.Results[i].ID, absolute), storedJob(t, ctx, sqlDB.Pool, *sqlRows[i].ID, absolute)
			if n == 1 && (c.delay != nil || c.runAt != nil) && !absolute {
				// Go's keyless batch times a delay or a past run_at by
				// this process's clock (see EnqueueBatch), the SQL one
				// by the database's.
				delete(goJob, "run_at")
				delete(sqlJob, "run_at")
			}
			require.Equal(t, goJob, sqlJob, c.name+" in a batch")
		}
	}
	for _, c := range sqlAPICases() {
		if c.refused == "" || strings.Contains(c.refused, "kind") {
			continue // a kind Define refuses makes no Entry
		}
		_, goErr, _, sqlErr := batch([]sqlAPICase{good[0], c})
		require.EqualError(t, goErr, "enqueue batch: item 1 ("+c.kind+"): "+c.refused, c.name)
		var pgErr *pgconn.PgError
		require.ErrorAs(t, sqlErr, &pgErr, c.name)
		require.Equal(t, goErr.Error(), pgErr.Message, c.name)
	}
	count := func(d *testdb.DB) (n int) {
		require.NoError(t, d.Pool.QueryRow(ctx, "SELECT count(*) FROM hopper_jobs").Scan(&n))
		return n
	}
	require.Equal(t, count(goDB), count(sqlDB), "a refused batch writes nothing")
}

type sqlAPIRow struct {
	ID       *int64
	Inserted bool
}

// TestSQLAPIRefusesWhatGoCannotSay: inputs only SQL can give are refused
// with a clear message, SQLSTATE 22023 and a hint: a NULL kind or payload,
// metadata that is not an object of strings, a batch that is not an array
// of objects, an unknown or mistyped field, a run time Go cannot read
// back ('infinity', a year past 9998, a delay that reaches one, or one so
// long that now() + delay would overflow PostgreSQL's range).
func TestSQLAPIRefusesWhatGoCannotSay(t *testing.T) {
	b := setup(t)
	const late = "hopper: invalid run time: run_at is in the year 9999 or later"
	const longDelay = "hopper: invalid run time: delay ends in the year 9999 or later"
	cases := []struct{ sql, message, code string }{
		{`hopper_enqueue(kind => 'k', payload => '{}', run_at => 'infinity')`, "enqueue k: " + late, "22023"},
		{`hopper_enqueue(kind => 'k', payload => '{}', run_at => '20000-01-01 00:00:00+00')`, "enqueue k: " + late, "22023"},
		{`hopper_enqueue(kind => 'k', payload => '{}', run_at => '294276-12-31 23:59:59+00')`, "enqueue k: " + late, "22023"},
		{`hopper_enqueue(kind => 'k', payload => '{}', delay => '8000 years')`, "enqueue k: " + longDelay, "22023"},
		{`hopper_enqueue(kind => 'k', payload => '{}', delay => '100000000 years')`, "enqueue k: " + longDelay, "22023"},
		{`hopper_enqueue(kind => 'k', payload => '{}', run_at => now(), delay => '178000000 years')`, "enqueue k: " + longDelay, "22023"},
		{`hopper_enqueue_many('[{"kind": "k", "payload": {}}, {"kind": "k", "payload": {}, "run_at": "infinity"}]')`, "enqueue batch: item 1 (k): " + late, "22023"},
		{`hopper_enqueue_many('[{"kind": "k", "payload": {}, "delay": "8000 years"}]')`, "enqueue batch: item 0 (k): " + longDelay, "22023"},
		{`hopper_enqueue_many('[{"kind": "k", "payload": {}, "unique_key": "u", "run_at": "infinity"}]')`, "enqueue batch: item 0 (k): " + late, "22023"},
	}
	var pg17 bool
	require.NoError(t, b.Pool.QueryRow(b.Ctx, "SELECT current_setting('server_version_num')::int >= 170000").Scan(&pg17))
	if pg17 { // intervals are infinite from PostgreSQL 17 on
		cases = append(cases,
			struct{ sql, message, code string }{`hopper_enqueue(kind => 'k', payload => '{}', delay => 'infinity')`, "enqueue k: " + longDelay, "22023"},
			struct{ sql, message, code string }{`hopper_enqueue(kind => 'k', payload => '{}', delay => '-infinity')`, "enqueue k: hopper: invalid run time: negative delay -infinity", "22023"})
	}
	for _, tc := range append(cases, []struct{ sql, message, code string }{
		{`hopper_enqueue(kind => NULL, payload => '{}')`, `enqueue: hopper: invalid job kind definition: kind name "" is empty`, "22023"},
		{`hopper_enqueue(kind => 'k', payload => NULL)`, "enqueue k: hopper: payload does not marshal to JSON: the payload is not valid JSON", "22023"},
		{`hopper_enqueue(kind => 'k', payload => '{}', meta => '["a"]')`, "enqueue k: hopper: invalid metadata: a JSON array, not an object", "22023"},
		{`hopper_enqueue(kind => 'k', payload => '{}', meta => '{"n": 1}')`, `enqueue k: hopper: invalid metadata: key "n": the value is not a string`, "22023"},
		{`hopper_enqueue_many(NULL)`, "enqueue batch: the jobs are NULL, not a JSON array", "22023"},
		{`hopper_enqueue_many('{"kind": "k"}')`, "enqueue batch: the jobs are a JSON object, not a JSON array", "22023"},
		{`hopper_enqueue_many('[{"kind": "k", "payload": {}}, 7]')`, "enqueue batch: item 1: a JSON number, not an object", "22023"},
		{`hopper_enqueue_many('[{"kind": "k", "payload": {}, "quue": "q"}]')`, `enqueue batch: item 0: unknown field "quue"`, "22023"},
		{`hopper_enqueue_many('[{"kind": "k", "payload": {}, "priority": "high"}]')`, `enqueue batch: item 0: invalid input syntax for type integer: "high"`, "22P02"},
		{`hopper_enqueue_many('[{"kind": "k", "payload": {}, "delay": "soon"}]')`, `enqueue batch: item 0: invalid input syntax for type interval: "soon"`, "22007"},
		{`hopper_enqueue_many('[{"kind": "k"}]')`, "enqueue batch: item 0 (k): hopper: payload does not marshal to JSON: the payload is not valid JSON", "22023"},
	}...) {
		_, err := b.Pool.Exec(b.Ctx, "SELECT * FROM "+tc.sql)
		var pgErr *pgconn.PgError
		require.True(t, errors.As(err, &pgErr), "%s: %v", tc.sql, err)
		require.Equal(t, tc.message, pgErr.Message, tc.sql)
		require.Equal(t, tc.code, pgErr.Code, tc.sql)
		require.NotEmpty(t, pgErr.Hint, tc.sql)
	}
	var n int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, "SELECT count(*) FROM hopper_enqueue_many('[]')").Scan(&n))
	require.Zero(t, n, "an empty batch")
	require.Zero(t, b.live(t))
}

// TestSQLAPIStoresTimesGoReads: the run times the SQL API accepts at their
// edges are stored as times Go reads back and writes as JSON: a past one,
// -infinity and a year BC included, is now; the last microsecond of 9998
// is kept. A raw INSERT cannot store what the functions refuse either
// (the check of migration 16).
func TestSQLAPIStoresTimesGoReads(t *testing.T) {
	b := setup(t)
	for _, tc := range []struct {
		name, sql string
		state     string
		at        time.Time // zero: now
	}{
		{"-infinity is now", `hopper_enqueue(kind => 'k', payload => '{}', run_at => '-infinity')`, "pending", time.Time{}},
		{"a year BC is now", `hopper_enqueue(kind => 'k', payload => '{}', run_at => '4000-01-01 00:00:00+00 BC')`, "pending", time.Time{}},
		{"-infinity in a batch", `hopper_enqueue_many('[{"kind": "k", "payload": {}, "run_at": "-infinity"}]')`, "pending", time.Time{}},
		{"the last microsecond of 9998", `hopper_enqueue(kind => 'k', payload => '{}', run_at => '9998-12-31 23:59:59.999999+00')`, "scheduled",
			time.Date(9998, 12, 31, 23, 59, 59, 999999000, time.UTC)},
		{"a delay to 9998", `hopper_enqueue(kind => 'k', payload => '{}', delay => timestamptz '9998-12-31 23:00:00+00' - now())`, "scheduled",
			time.Date(9998, 12, 31, 23, 0, 0, 0, time.UTC)},
	} {
		var id int64
		require.NoError(t, b.Pool.QueryRow(b.Ctx, "SELECT id FROM "+tc.sql).Scan(&id), tc.name)
		var state string
		var at time.Time
		require.NoError(t, b.Pool.QueryRow(b.Ctx, "SELECT state, run_at FROM hopper_jobs WHERE id = $1", id).Scan(&state, &at), tc.name)
		require.Equal(t, tc.state, state, tc.name)
		if tc.at.IsZero() {
			require.WithinDuration(t, time.Now(), at, time.Minute, tc.name)
		} else {
			require.WithinDuration(t, tc.at, at, time.Second, tc.name)
		}
		for _, zone := range []*time.Location{time.UTC, time.FixedZone("+14", 14*3600), time.FixedZone("-12", -12*3600)} {
			_, err := json.Marshal(at.In(zone))
			require.NoError(t, err, "%s: Go writes it as JSON in %v", tc.name, zone)
		}
	}
	for _, at := range []string{"infinity", "-infinity", "9999-01-01 00:00:00+00", "0001-12-31 23:59:59+00 BC"} {
		_, err := b.Pool.Exec(b.Ctx, "INSERT INTO hopper_jobs (queue, kind, payload, state, run_at) VALUES ('default', 'k', '{}', 'scheduled', $1::timestamptz)", at)
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr, at)
		require.Equal(t, "23514", pgErr.Code, at)
		require.Equal(t, "hopper_jobs_run_at_check", pgErr.ConstraintName, at)
	}
}
