-- Back to no sequences: waiting jobs become ready (or scheduled) as they
-- are, in no particular order among their key.
DROP FUNCTION IF EXISTS hopper_enqueue_many(jsonb);
ALTER FUNCTION hopper_enqueue_many_checked(jsonb) RENAME TO hopper_enqueue_many;
DROP FUNCTION IF EXISTS hopper_enqueue_values(text, text, text, jsonb, integer, text, integer, timestamptz, interval, text, integer, jsonb, text);
ALTER FUNCTION hopper_enqueue_values_checked(text, text, text, jsonb, integer, text, integer, timestamptz, interval, text, integer, jsonb, text)
    RENAME TO hopper_enqueue_values;

DROP TRIGGER IF EXISTS hopper_jobs_sequence_advance ON hopper_jobs;
DROP TRIGGER IF EXISTS hopper_jobs_sequence_place ON hopper_jobs;
DROP TRIGGER IF EXISTS hopper_jobs_sequence_collect ON hopper_jobs;
DROP FUNCTION IF EXISTS hopper_sequence_skip(text);
DROP FUNCTION IF EXISTS hopper_sequence_advance();
DROP FUNCTION IF EXISTS hopper_sequence_place();
DROP FUNCTION IF EXISTS hopper_sequence_collect();
DROP FUNCTION IF EXISTS hopper_sequence_before(text, bigint);
DROP FUNCTION IF EXISTS hopper_sequence_promote_keys(text[]);
DROP FUNCTION IF EXISTS hopper_sequence_promote(text);
DROP FUNCTION IF EXISTS hopper_sequence_lock_id(text);
DROP TABLE IF EXISTS hopper_sequence_blocks;
DROP INDEX IF EXISTS hopper_jobs_sequence_head_idx;
DROP INDEX IF EXISTS hopper_jobs_sequence_waiting_idx;
ALTER TABLE hopper_jobs DROP CONSTRAINT IF EXISTS hopper_jobs_sequence_check;

UPDATE hopper_jobs SET state = CASE WHEN run_at > now() THEN 'scheduled' ELSE 'pending' END
WHERE state = 'waiting';
ALTER TABLE hopper_jobs DROP CONSTRAINT hopper_jobs_state_check;
ALTER TABLE hopper_jobs
    ADD CONSTRAINT hopper_jobs_state_check CHECK (state IN ('pending', 'scheduled', 'running')) NOT VALID;
ALTER TABLE hopper_jobs VALIDATE CONSTRAINT hopper_jobs_state_check;
