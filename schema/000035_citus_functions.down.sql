-- Undoes 000035: hopper_workflow_retry as migrations 15 and 24 left it,
-- and hopper_ready_keys as migration 31 did.

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

CREATE OR REPLACE FUNCTION hopper_ready_keys(in_queue text, after_key text, max_keys integer, key_limit integer)
RETURNS SETOF text
LANGUAGE sql STABLE AS $$
    WITH RECURSIVE keys AS (
        SELECT first.key, first.open, first.open::integer AS found, 1 AS steps
        FROM (SELECT k.key,
                     lim.n <= 0 OR (SELECT count(*) FROM (SELECT FROM hopper_jobs AS r
                                                         WHERE r.queue = in_queue AND r.state = 'running'
                                                           AND r.concurrency_key = k.key
                                                         LIMIT lim.n) AS busy) < lim.n AS open
              FROM (SELECT min(j.concurrency_key) AS key
                    FROM hopper_jobs AS j
                    WHERE j.queue = in_queue AND j.state = 'pending' AND j.concurrency_key > after_key) AS k
              CROSS JOIN LATERAL (
                  SELECT coalesce((SELECT l.max_running FROM hopper_key_limits AS l
                                   WHERE l.queue = in_queue AND l.key = k.key), key_limit) AS n) AS lim) AS first
        UNION ALL
        SELECT nxt.key, nxt.open, keys.found + nxt.open::integer, keys.steps + 1
        FROM keys
        CROSS JOIN LATERAL (
            SELECT k.key,
                   lim.n <= 0 OR (SELECT count(*) FROM (SELECT FROM hopper_jobs AS r
                                                       WHERE r.queue = in_queue AND r.state = 'running'
                                                         AND r.concurrency_key = k.key
                                                       LIMIT lim.n) AS busy) < lim.n AS open
            FROM (SELECT min(j.concurrency_key) AS key
                  FROM hopper_jobs AS j
                  WHERE j.queue = in_queue AND j.state = 'pending' AND j.concurrency_key > keys.key) AS k
            CROSS JOIN LATERAL (
                SELECT coalesce((SELECT l.max_running FROM hopper_key_limits AS l
                                 WHERE l.queue = in_queue AND l.key = k.key), key_limit) AS n) AS lim
        ) AS nxt
        WHERE keys.key IS NOT NULL AND keys.found < max_keys AND keys.steps < 20 * max_keys
    )
    SELECT keys.key FROM keys WHERE keys.key IS NOT NULL AND keys.open
$$;
