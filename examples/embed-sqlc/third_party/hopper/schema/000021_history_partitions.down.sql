-- Every row goes back to the default partition, which becomes the plain
-- table it was. This reads and writes every row kept in a partition.
DROP FUNCTION hopper_history_partitions_ensure(interval, interval);
DROP FUNCTION hopper_history_partitions_drop();
UPDATE hopper_job_history SET drop_after = NULL WHERE drop_after IS NOT NULL;
DO $$
DECLARE
    part text;
BEGIN
    FOR part IN SELECT p.name FROM hopper_history_partitions AS p LOOP
        EXECUTE format('DROP TABLE %I', part);
    END LOOP;
END;
$$;
DROP TABLE hopper_history_partitions;
CREATE OR REPLACE VIEW hopper_all_jobs AS
SELECT j.id, j.queue, j.kind, j.version, j.payload, j.state, j.priority, j.run_at,
       j.attempt, j.max_attempts, j.lease_owner, j.lease_until, j.unique_key, j.errors,
       j.created_at, NULL::timestamptz AS finished_at, NULL::text AS reason, NULL::jsonb AS result,
       j.meta, j.concurrency_key
FROM hopper_jobs AS j
UNION ALL
SELECT d.id, d.queue, d.kind, d.version, d.payload, d.state, d.priority, d.run_at,
       d.attempt, d.max_attempts, NULL::text, NULL::timestamptz, d.unique_key, d.errors,
       d.created_at, d.died_at, d.reason, NULL::jsonb, d.meta, d.concurrency_key
FROM hopper_dead_jobs AS d
UNION ALL
SELECT h.id, h.queue, h.kind, h.version, h.payload, 'completed'::text, h.priority, h.run_at,
       h.attempt, h.max_attempts, NULL::text, NULL::timestamptz, h.unique_key, h.errors,
       h.created_at, h.finished_at, NULL::text, h.result, h.meta, h.concurrency_key
FROM hopper_job_history_default AS h;
ALTER TABLE hopper_job_history DETACH PARTITION hopper_job_history_default;
DROP TABLE hopper_job_history;
ALTER TABLE hopper_job_history_default RENAME TO hopper_job_history;
