package jobs_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
)

// BenchmarkSQLAPI compares the SQL API with Go's enqueue, per job: one job
// by Kind.Enqueue and by hopper_enqueue (one round trip each), and batches
// by EnqueueBatch and by hopper_enqueue_many (one statement each), with
// and without a unique key per job. Each iteration enqueues once through
// Go and once through SQL, in alternating order, so that both see the same
// load on a shared machine: read go-us/job against sql-us/job, and
// sql/go. Printed, never asserted:
//
//	go test -run '^$' -bench SQLAPI -count 5 ./jobs
func BenchmarkSQLAPI(b *testing.B) {
	tdb := testdb.New(b)
	ctx := context.Background()
	payload := Note{Text: "bench"}
	seq := 0
	key := func() string { seq++; return fmt.Sprint("k", seq) }

	for _, n := range []int{1, 100, 1000} {
		for _, unique := range []bool{false, true} {
			name := fmt.Sprint("jobs=", n)
			if unique {
				name += "/unique"
			}
			// One enqueue of n jobs through Go, and through SQL.
			viaGo := func() {
				var opts []jobs.EnqueueOption
				if n == 1 {
					if unique {
						opts = append(opts, jobs.UniqueKey(key()))
					}
					if _, err := noteKind.Enqueue(ctx, tdb.Pool, payload, opts...); err != nil {
						b.Fatal(err)
					}
					return
				}
				entries := make([]jobs.Entry, n)
				for i := range entries {
					opts = opts[:0]
					if unique {
						opts = append(opts, jobs.UniqueKey(key()))
					}
					entries[i] = noteKind.Entry(payload, opts...)
				}
				if _, err := jobs.EnqueueBatch(ctx, tdb.Pool, entries); err != nil {
					b.Fatal(err)
				}
			}
			viaSQL := func() {
				if n == 1 {
					var uk *string
					if unique {
						k := key()
						uk = &k
					}
					var id int64
					if err := tdb.Pool.QueryRow(ctx, `SELECT id FROM hopper_enqueue(kind => $1, payload => $2, unique_key => $3)`,
						noteKind.Name(), `{"text": "bench"}`, uk).Scan(&id); err != nil {
						b.Fatal(err)
					}
					return
				}
				array := make([]map[string]any, n)
				for i := range array {
					array[i] = map[string]any{"kind": noteKind.Name(), "payload": payload}
					if unique {
						array[i]["unique_key"] = key()
					}
				}
				raw, err := json.Marshal(array)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := tdb.Pool.Exec(ctx, `SELECT count(*) FROM hopper_enqueue_many($1)`, string(raw)); err != nil {
					b.Fatal(err)
				}
			}
			b.Run(name, func(b *testing.B) {
				var goTime, sqlTime time.Duration
				timed := func(fn func(), into *time.Duration) {
					start := time.Now()
					fn()
					*into += time.Since(start)
				}
				i := 0
				for b.Loop() {
					if i%2 == 0 {
						timed(viaGo, &goTime)
						timed(viaSQL, &sqlTime)
					} else {
						timed(viaSQL, &sqlTime)
						timed(viaGo, &goTime)
					}
					i++
				}
				jobsDone := float64(b.N * n)
				b.ReportMetric(float64(goTime.Microseconds())/jobsDone, "go-us/job")
				b.ReportMetric(float64(sqlTime.Microseconds())/jobsDone, "sql-us/job")
				b.ReportMetric(float64(sqlTime)/float64(goTime), "sql/go")
			})
		}
	}
}
