DROP TRIGGER IF EXISTS hopper_jobs_notify_enqueued ON hopper_jobs;
DROP FUNCTION IF EXISTS hopper_notify_enqueued();
DROP TABLE IF EXISTS hopper_dead_jobs;
DROP TABLE IF EXISTS hopper_jobs;
