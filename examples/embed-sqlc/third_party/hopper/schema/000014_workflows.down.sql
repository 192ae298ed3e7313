-- Back to no workflows: steps waiting for parents become ready (or
-- scheduled) as they are, their edges forgotten.
DROP TRIGGER IF EXISTS hopper_jobs_workflow_returned ON hopper_jobs;
DROP TRIGGER IF EXISTS hopper_jobs_workflow_advance ON hopper_jobs;
DROP FUNCTION IF EXISTS hopper_workflow_retry(text);
DROP FUNCTION IF EXISTS hopper_workflow_link(bigint[], bigint[], bigint);
DROP FUNCTION IF EXISTS hopper_workflow_count(bigint[], bigint[], bigint);
DROP FUNCTION IF EXISTS hopper_workflow_returned();
DROP FUNCTION IF EXISTS hopper_workflow_advance();
DROP FUNCTION IF EXISTS hopper_workflow_pass(bigint[]);
DROP FUNCTION IF EXISTS hopper_workflow_decide(bigint[]);
DROP TABLE IF EXISTS hopper_workflow_waits;
DROP TABLE IF EXISTS hopper_workflow_deps;
DROP INDEX IF EXISTS hopper_job_history_workflow_idx;
DROP INDEX IF EXISTS hopper_dead_jobs_workflow_idx;
DROP INDEX IF EXISTS hopper_jobs_workflow_idx;
ALTER TABLE hopper_jobs DROP CONSTRAINT IF EXISTS hopper_jobs_workflow_check;

UPDATE hopper_jobs SET state = CASE WHEN run_at > now() THEN 'scheduled' ELSE 'pending' END
WHERE state = 'waiting' AND NOT coalesce(meta ? 'hopper.sequence', false);
ALTER TABLE hopper_jobs DROP CONSTRAINT hopper_jobs_sequence_check;
ALTER TABLE hopper_jobs
    ADD CONSTRAINT hopper_jobs_sequence_check CHECK (
        (meta IS NULL OR NOT meta ? 'hopper.sequence'
         OR (jsonb_typeof(meta -> 'hopper.sequence') = 'string'
             AND octet_length(meta ->> 'hopper.sequence') BETWEEN 1 AND 255))
        AND (meta IS NULL OR NOT meta ? 'hopper.sequence_policy'
             OR meta ->> 'hopper.sequence_policy' IN ('block', 'continue'))
        AND (state <> 'waiting' OR coalesce(meta ? 'hopper.sequence', false))
    ) NOT VALID;
ALTER TABLE hopper_jobs VALIDATE CONSTRAINT hopper_jobs_sequence_check;
