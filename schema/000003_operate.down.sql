-- Cancelled jobs stay in hopper_dead_jobs, as dead ones with reason cancelled.
DROP VIEW IF EXISTS hopper_all_jobs;
DROP TABLE IF EXISTS hopper_job_history;
DROP INDEX IF EXISTS hopper_dead_jobs_unique_key_idx;
ALTER TABLE hopper_dead_jobs DROP COLUMN IF EXISTS state, DROP COLUMN IF EXISTS run_at;
DROP TABLE IF EXISTS hopper_queues;
ALTER TABLE hopper_jobs DROP CONSTRAINT IF EXISTS hopper_jobs_id_check;
