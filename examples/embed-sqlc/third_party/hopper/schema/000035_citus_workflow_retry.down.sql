-- Undoes 000035: hopper_workflow_retry as migrations 15 and 24 left it.

CREATE OR REPLACE FUNCTION hopper_workflow_retry(workflow text) RETURNS SETOF bigint
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_variable
BEGIN
    PERFORM pg_advisory_xact_lock(hopper_workflow_lock_id(workflow));
    RETURN QUERY
    WITH picked AS (
        SELECT d.id
        FROM hopper_dead_jobs AS d
        WHERE d.meta ? 'hopper.workflow' AND (d.meta ->> 'hopper.workflow') = workflow
        ORDER BY d.id
        -- A step another transaction holds (a purge) is that one's.
        FOR UPDATE SKIP LOCKED
    ), revived AS (
        INSERT INTO hopper_jobs (id, queue, kind, version, payload, priority, attempt,
                                 max_attempts, unique_key, errors, created_at, meta, concurrency_key, state, run_at)
        OVERRIDING SYSTEM VALUE
        SELECT d.id, d.queue, d.kind, d.version, d.payload, d.priority, d.attempt,
               least(d.attempt::bigint + d.max_attempts, 2147483647)::integer, d.unique_key, d.errors, d.created_at, d.meta, d.concurrency_key,
               CASE WHEN EXISTS (SELECT FROM hopper_workflow_deps AS e WHERE e.child_id = d.id) THEN 'waiting' ELSE 'pending' END,
               now()
        FROM hopper_dead_jobs AS d
        JOIN picked ON picked.id = d.id
        ORDER BY d.id
        ON CONFLICT DO NOTHING
        RETURNING id
    ), moved AS (
        DELETE FROM hopper_dead_jobs AS dead
        USING revived
        WHERE dead.id = revived.id
        RETURNING dead.id
    )
    SELECT m.id FROM moved AS m ORDER BY m.id;
END;
$$;

DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION %1$I.hopper_workflow_retry(text) SET search_path = %1$I, pg_temp', current_schema());
END
$$;
ALTER FUNCTION hopper_workflow_retry(text) SET plan_cache_mode = force_generic_plan;
