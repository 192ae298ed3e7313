-- One call's write in the durable mode: worker.StepTx's transaction, or a
-- plain transaction, writes this row and nothing else.
INSERT INTO hopper_bench_durable_rows (job_id, call) VALUES ($1, $2);
