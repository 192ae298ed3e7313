-- Flow control is dropped with its columns; the view goes back to its shape
-- of migration 5.
DROP VIEW IF EXISTS hopper_all_jobs;
CREATE VIEW hopper_all_jobs AS
SELECT j.id, j.queue, j.kind, j.version, j.payload, j.state, j.priority, j.run_at,
       j.attempt, j.max_attempts, j.lease_owner, j.lease_until, j.unique_key, j.errors,
       j.created_at, NULL::timestamptz AS finished_at, NULL::text AS reason, NULL::jsonb AS result,
       j.meta
FROM hopper_jobs AS j
UNION ALL
SELECT d.id, d.queue, d.kind, d.version, d.payload, d.state, d.priority, d.run_at,
       d.attempt, d.max_attempts, NULL::text, NULL::timestamptz, d.unique_key, d.errors,
       d.created_at, d.died_at, d.reason, NULL::jsonb, d.meta
FROM hopper_dead_jobs AS d
UNION ALL
SELECT h.id, h.queue, h.kind, h.version, h.payload, 'completed'::text, h.priority, h.run_at,
       h.attempt, h.max_attempts, NULL::text, NULL::timestamptz, h.unique_key, h.errors,
       h.created_at, h.finished_at, NULL::text, h.result, h.meta
FROM hopper_job_history AS h;
DROP TABLE IF EXISTS hopper_rate_claims;
ALTER TABLE hopper_queues DROP COLUMN IF EXISTS aged_at;
DROP FUNCTION IF EXISTS hopper_ready_keys(text, text, integer, integer);
DROP INDEX IF EXISTS hopper_jobs_key_idx;
ALTER TABLE hopper_job_history DROP COLUMN IF EXISTS concurrency_key;
ALTER TABLE hopper_dead_jobs DROP COLUMN IF EXISTS concurrency_key;
ALTER TABLE hopper_jobs DROP CONSTRAINT IF EXISTS hopper_jobs_concurrency_key_check, DROP COLUMN IF EXISTS concurrency_key;
