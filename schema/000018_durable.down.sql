DROP TRIGGER IF EXISTS hopper_dead_jobs_durable_ended ON hopper_dead_jobs;
DROP TRIGGER IF EXISTS hopper_jobs_durable_ended ON hopper_jobs;
DROP FUNCTION IF EXISTS hopper_durable_ended();
DROP FUNCTION IF EXISTS hopper_emit_event(text, jsonb);
DROP TABLE IF EXISTS hopper_job_progress;
DROP TABLE IF EXISTS hopper_events;
DROP TABLE IF EXISTS hopper_job_steps;
