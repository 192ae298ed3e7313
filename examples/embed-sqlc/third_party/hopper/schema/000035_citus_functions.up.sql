-- Two functions written so that Citus can plan them on a distributed
-- schema (docs/scaling-out.md, What Citus refuses).
--
-- 1. hopper_workflow_retry. Citus 13.2.2 refused every retry of a
-- workflow (RetryWorkflow, and the SQL API's hopper_workflow_retry) on a
-- distributed schema: its INSERT ... SELECT from the dead jobs had the
-- workflow's name as a parameter in a generic plan ("could not create
-- distributed plan", migration 33's note 3), and that SELECT read a table of the shard, which Citus deparses
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
-- 2. hopper_ready_keys. Citus refuses to plan the statement of a SQL
-- function that reads a distributed table when the function is not
-- inlined ("parameterized queries for SQL functions referencing
-- distributed tables are not supported"), and on a distributed schema it
-- is not: every flow-controlled claim (DequeueLimited, which reads the
-- next keys with ready work from it) failed so, through the coordinator
-- and on the node alike. It becomes a PL/pgSQL function that returns the
-- same query, whose arguments are the function's variables, which Citus
-- plans as values. The same keys, in the same order; on PostgreSQL the
-- claim calls the function instead of reading its query inlined, once a
-- claim, and the function plans its query once a session.
--
-- Guarded by: tests/citus/TestCitusRefusals, the root package's
-- TestWorkflowRetryOneStep and TestCancelAndRetryWorkflow, the keyed and
-- fair claims of queries and worker,
-- schema/TestKeysOrderBytewiseUnderAnyCollation.

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

CREATE OR REPLACE FUNCTION hopper_ready_keys(in_queue text, after_key text, max_keys integer, key_limit integer)
RETURNS SETOF text
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN QUERY
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
        SELECT keys.key FROM keys WHERE keys.key IS NOT NULL AND keys.open;
END;
$$;

-- CREATE OR REPLACE sets a function's settings anew: they are restated
-- (hopper_ready_keys has none: it runs in the claim's schema).
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION %1$I.hopper_workflow_retry(text) SET search_path = %1$I, pg_temp', current_schema());
END
$$;
ALTER FUNCTION hopper_workflow_retry(text) SET plan_cache_mode = force_generic_plan;
