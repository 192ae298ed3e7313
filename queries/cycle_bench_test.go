package queries_test

import (
	"encoding/json"
	"testing"

	"github.com/hopperq/hopper/db"
)

// cycleVariants are the parts of the job table one plain job pays for,
// each removed alone: the difference between a variant and "as is" is
// what that part costs a job. They change a scratch schema only.
var cycleVariants = []struct{ name, alter string }{
	{"as_is", ""},
	{"no_wakeup_trigger", `ALTER TABLE hopper_jobs DISABLE TRIGGER hopper_jobs_notify_enqueued`},
	{"no_other_insert_triggers", `ALTER TABLE hopper_jobs DISABLE TRIGGER hopper_jobs_sequence_collect;
		ALTER TABLE hopper_jobs DISABLE TRIGGER hopper_jobs_sequence_place;
		ALTER TABLE hopper_jobs DISABLE TRIGGER hopper_jobs_workflow_returned;
		ALTER TABLE hopper_jobs DISABLE TRIGGER hopper_jobs_isolation_insert`},
	{"no_delete_triggers", `ALTER TABLE hopper_jobs DISABLE TRIGGER hopper_jobs_sequence_advance;
		ALTER TABLE hopper_jobs DISABLE TRIGGER hopper_jobs_workflow_advance;
		ALTER TABLE hopper_jobs DISABLE TRIGGER hopper_jobs_isolation_delete;
		ALTER TABLE hopper_jobs DISABLE TRIGGER hopper_jobs_durable_ended`},
	{"no_lease_index", `DROP INDEX hopper_jobs_lease_idx`},
	{"no_unused_partial_indexes", `DROP INDEX hopper_jobs_scheduled_idx, hopper_jobs_unique_key_idx, hopper_jobs_key_idx,
		hopper_jobs_sequence_waiting_idx, hopper_jobs_sequence_head_idx, hopper_jobs_workflow_idx`},
	{"fillfactor_100", `ALTER TABLE hopper_jobs SET (fillfactor = 100)`},
}

// BenchmarkJobCycle is a plain job's whole life at batches of 1,000
// (COPY, Dequeue, AckBatch), per job, once as the schema is and once
// without each part of cycleVariants (make bench-go, or -bench
// JobCycle -count 5 and benchstat): what each index, trigger and setting
// costs the cycle, round trips included.
func BenchmarkJobCycle(b *testing.B) {
	for _, v := range cycleVariants {
		b.Run(v.name, func(b *testing.B) {
			ctx, q, pool := benchSetupPool(b, 0)
			if v.alter != "" {
				if _, err := pool.Exec(ctx, v.alter); err != nil {
					b.Fatal(err)
				}
			}
			rows := make([]db.EnqueueBatchParams, benchBatch)
			for i := range rows {
				rows[i] = db.EnqueueBatchParams{Queue: "default", Kind: "k", Version: 1, Payload: json.RawMessage(`{"user_id":42}`), MaxAttempts: 5}
			}
			b.ResetTimer()
			for done := 0; done < b.N; done += benchBatch {
				n := min(benchBatch, b.N-done)
				if _, err := q.EnqueueBatch(ctx, withIDs(b, q, rows[:n])); err != nil {
					b.Fatal(err)
				}
				p := db.AckBatchParams{}
				for _, j := range dequeue(ctx, b, q, n) {
					p.Ids = append(p.Ids, j.ID)
					p.Attempts = append(p.Attempts, j.Attempt)
				}
				if _, err := q.AckBatch(ctx, p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
