ALTER FUNCTION hopper_durable_ended() RESET plan_cache_mode;
ALTER FUNCTION hopper_sequence_advance() RESET plan_cache_mode;
ALTER FUNCTION hopper_workflow_advance() RESET plan_cache_mode;
ALTER FUNCTION hopper_workflow_count(bigint[]) RESET plan_cache_mode;
ALTER FUNCTION hopper_workflow_decide(bigint[]) RESET plan_cache_mode;
ALTER FUNCTION hopper_workflow_link(bigint[], bigint[]) RESET plan_cache_mode;
ALTER FUNCTION hopper_workflow_pass(bigint[]) RESET plan_cache_mode;
ALTER FUNCTION hopper_workflow_retry(text) RESET plan_cache_mode;
-- Every row goes back to the default partition, which becomes the plain
-- table it was, with its triggers. This reads and writes every row kept
-- in a partition.
DROP FUNCTION hopper_dead_partitions_ensure(interval, interval);
DROP FUNCTION hopper_dead_partitions_drop(interval);
UPDATE hopper_dead_jobs SET partition_at = NULL WHERE partition_at IS NOT NULL;
DO $$
DECLARE
    part text;
BEGIN
    FOR part IN SELECT p.name FROM hopper_dead_partitions AS p LOOP
        EXECUTE format('DROP TABLE %I', part);
    END LOOP;
END;
$$;
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
FROM hopper_dead_jobs_default AS d
UNION ALL
SELECT h.id, h.queue, h.kind, h.version, h.payload, 'completed'::text, h.priority, h.run_at,
       h.attempt, h.max_attempts, NULL::text, NULL::timestamptz, h.unique_key, h.errors,
       h.created_at, h.finished_at, NULL::text, h.result, h.meta, h.concurrency_key
FROM hopper_job_history AS h;
ALTER TABLE hopper_dead_jobs DETACH PARTITION hopper_dead_jobs_default;
DROP TABLE hopper_dead_jobs;
DROP FUNCTION hopper_dead_partition_at(timestamptz); -- its body names the list
DROP TABLE hopper_dead_partitions;
ALTER TABLE hopper_dead_jobs_default RENAME TO hopper_dead_jobs;
CREATE TRIGGER hopper_dead_jobs_durable_ended AFTER DELETE ON hopper_dead_jobs
    REFERENCING OLD TABLE AS hopper_ended_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION hopper_durable_ended('hopper_jobs');
CREATE TRIGGER hopper_dead_jobs_isolation_delete AFTER DELETE ON hopper_dead_jobs
    REFERENCING OLD TABLE AS hopper_isolation_rows
    FOR EACH STATEMENT EXECUTE FUNCTION hopper_isolation_check();
CREATE TRIGGER hopper_dead_jobs_workflow_purged AFTER DELETE ON hopper_dead_jobs
    REFERENCING OLD TABLE AS hopper_purged_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION hopper_workflow_purged();
