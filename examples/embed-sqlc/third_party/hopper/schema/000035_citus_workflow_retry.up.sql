-- hopper_workflow_retry written so that Citus can plan it on a
-- distributed schema (docs/scaling-out.md, What Citus refuses).
--
-- Citus 13.2.2 refused every retry of a workflow (RetryWorkflow, and the
-- SQL API's hopper_workflow_retry) on a distributed schema: its INSERT ...
-- SELECT from the dead jobs had the workflow's name as a parameter in a
-- generic plan ("could not create distributed plan", migration 33's note
-- 3), and that SELECT read a table of the shard, which Citus deparses
-- wrongly ("syntax error at or near NOT"). The function now runs the same
-- statement by EXECUTE ... USING, planned at each call with the name as a
-- value, and the steps picked are read once, with every column the insert
-- needs and whether the step waits for parents, into a materialized part
-- that the insert reads alone. The delete from the dead jobs takes the ids
-- the insert returns, by an array, and so comes after it on Citus too,
-- where each part of a statement runs as a statement of its own: its
-- triggers (durable records, a purged step's edges) find the steps live
-- again, as on PostgreSQL. The same steps come back, in the same states,
-- with the same attempts; the lock on the workflow's turn is taken first,
-- as before.
--
-- Guarded by: tests/citus/TestCitusRefusals, the root package's
-- TestWorkflowRetryOneStep and TestCancelAndRetryWorkflow.

CREATE OR REPLACE FUNCTION hopper_workflow_retry(workflow text) RETURNS SETOF bigint
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_variable
BEGIN
    PERFORM pg_advisory_xact_lock(hopper_workflow_lock_id(workflow));
    -- Planned at each call, with the workflow's name as a value (see the
    -- migration's note): the insert reads the rows picked alone, and the
    -- delete reads the insert's answer.
    RETURN QUERY EXECUTE
    'WITH picked AS MATERIALIZED (
        SELECT d.id, d.queue, d.kind, d.version, d.payload, d.priority, d.attempt,
               least(d.attempt::bigint + d.max_attempts, 2147483647)::integer AS max_attempts,
               d.unique_key, d.errors, d.created_at, d.meta, d.concurrency_key,
               CASE WHEN EXISTS (SELECT FROM hopper_workflow_deps AS e WHERE e.child_id = d.id)
                    THEN ''waiting'' ELSE ''pending'' END AS state
        FROM hopper_dead_jobs AS d
        WHERE d.meta ? ''hopper.workflow'' AND (d.meta ->> ''hopper.workflow'') = $1
        ORDER BY d.id
        -- A step another transaction holds (a purge) is that one''s.
        FOR UPDATE OF d SKIP LOCKED
    ), revived AS (
        INSERT INTO hopper_jobs (id, queue, kind, version, payload, priority, attempt,
                                 max_attempts, unique_key, errors, created_at, meta, concurrency_key, state, run_at)
        OVERRIDING SYSTEM VALUE
        SELECT p.id, p.queue, p.kind, p.version, p.payload, p.priority, p.attempt,
               p.max_attempts, p.unique_key, p.errors, p.created_at, p.meta, p.concurrency_key, p.state, $2
        FROM picked AS p
        ORDER BY p.id
        ON CONFLICT DO NOTHING
        RETURNING id
    ), moved AS (
        DELETE FROM hopper_dead_jobs AS dead
        WHERE dead.id = ANY (ARRAY(SELECT revived.id FROM revived))
        RETURNING dead.id
    )
    SELECT m.id FROM moved AS m ORDER BY m.id'
    USING workflow, now();
END;
$$;

-- CREATE OR REPLACE sets a function's settings anew: they are restated.
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION %1$I.hopper_workflow_retry(text) SET search_path = %1$I, pg_temp', current_schema());
END
$$;
ALTER FUNCTION hopper_workflow_retry(text) SET plan_cache_mode = force_generic_plan;
