-- Job metadata: a JSON object set at enqueue, for tags of the user's own
-- (a tenant, a request id) and for trace context (W3C traceparent, written
-- by the tracing middleware). It travels with the job: handlers see it, and
-- the dead table and the history keep it. Bounded, since every claim reads
-- it: 8 KiB of JSON text at most (enqueue checks the same limit first, with
-- a clearer error). NULL is none: most jobs have none, and a zero-valued
-- parameter (a COPY row of an embedder's own) stays valid.
-- The check is added NOT VALID, then validated: validation does not block
-- the workers' writes on a large table (and every row is NULL so far).
ALTER TABLE hopper_jobs
    ADD COLUMN meta jsonb,
    ADD CONSTRAINT hopper_jobs_meta_check CHECK (meta IS NULL OR (jsonb_typeof(meta) = 'object' AND octet_length(meta::text) <= 8192)) NOT VALID;
ALTER TABLE hopper_jobs VALIDATE CONSTRAINT hopper_jobs_meta_check;
ALTER TABLE hopper_dead_jobs ADD COLUMN meta jsonb;
ALTER TABLE hopper_job_history ADD COLUMN meta jsonb;

DROP VIEW hopper_all_jobs;
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
