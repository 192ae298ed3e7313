package jobs_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/hopperq/hopper/internal/testdb"
	"github.com/hopperq/hopper/jobs"
)

// BenchmarkSQLAPI compares the SQL API with Go's enqueue, per job (ns/job):
// one job by Kind.Enqueue and by hopper_enqueue, each one round trip; a
// batch by EnqueueBatch and by hopper_enqueue_many, each one statement;
// and the same with a unique key per job (Go's EnqueueBatch then takes
// its INSERT … ON CONFLICT path, like hopper_enqueue_many always does).
// Printed, never asserted: go test -run '^$' -bench SQLAPI ./jobs
func BenchmarkSQLAPI(b *testing.B) {
	tdb := testdb.New(b)
	ctx := context.Background()
	payload := Note{Text: "bench"}
	seq := 0
	key := func() string { seq++; return fmt.Sprint("k", seq) }

	b.Run("single/go", func(b *testing.B) {
		for b.Loop() {
			if _, err := noteKind.Enqueue(ctx, tdb.Pool, payload); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/job")
	})
	b.Run("single/sql", func(b *testing.B) {
		for b.Loop() {
			var id int64
			if err := tdb.Pool.QueryRow(ctx, `SELECT id FROM hopper_enqueue(kind => $1, payload => $2)`, noteKind.Name(), `{"text": "bench"}`).Scan(&id); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/job")
	})
	b.Run("single-unique/go", func(b *testing.B) {
		for b.Loop() {
			if _, err := noteKind.Enqueue(ctx, tdb.Pool, payload, jobs.UniqueKey(key())); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/job")
	})
	b.Run("single-unique/sql", func(b *testing.B) {
		for b.Loop() {
			var id int64
			if err := tdb.Pool.QueryRow(ctx, `SELECT id FROM hopper_enqueue(kind => $1, payload => $2, unique_key => $3)`, noteKind.Name(), `{"text": "bench"}`, key()).Scan(&id); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/job")
	})
	for _, n := range []int{100, 1000} {
		for _, unique := range []bool{false, true} {
			name := fmt.Sprint("batch-", n)
			if unique {
				name += "-unique"
			}
			batch := func() ([]jobs.Entry, string) {
				entries := make([]jobs.Entry, n)
				array := make([]map[string]any, n)
				for i := range entries {
					var opts []jobs.EnqueueOption
					array[i] = map[string]any{"kind": noteKind.Name(), "payload": payload}
					if unique {
						k := key()
						opts = append(opts, jobs.UniqueKey(k))
						array[i]["unique_key"] = k
					}
					entries[i] = noteKind.Entry(payload, opts...)
				}
				raw, err := json.Marshal(array)
				if err != nil {
					b.Fatal(err)
				}
				return entries, string(raw)
			}
			b.Run(name+"/go", func(b *testing.B) {
				for b.Loop() {
					b.StopTimer()
					entries, _ := batch()
					b.StartTimer()
					if _, err := jobs.EnqueueBatch(ctx, tdb.Pool, entries); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/job")
			})
			b.Run(name+"/sql", func(b *testing.B) {
				for b.Loop() {
					b.StopTimer()
					_, array := batch()
					b.StartTimer()
					if _, err := tdb.Pool.Exec(ctx, `SELECT count(*) FROM hopper_enqueue_many($1)`, array); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/job")
			})
		}
	}
}
