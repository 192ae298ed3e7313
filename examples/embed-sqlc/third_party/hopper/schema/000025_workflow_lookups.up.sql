-- Workflow steps looked up by id at the cost of a probe each, and only
-- where needed.
--
-- 1. The waiting jobs of each sequence key, and of no workflow step.
--
-- Migration 13 indexed every waiting job by its sequence key, when only
-- sequence jobs waited. Since migration 14 a workflow step with parents
-- waits too, so the index held an entry (key NULL) for every waiting step:
-- a write per step that nothing reads, and worse, a path the planner took
-- for the workflow functions' look-ups of steps by id ("j.id = ANY (...)
-- AND j.state = 'waiting'"): under their generic plans it scanned every
-- waiting step of the table for each call, so enqueueing a batch of
-- workflows grew with the steps already waiting (1,000 diamonds: 0.42,
-- 0.59, 0.96 s for three batches in a row; 0.17–0.25 s with this index).
--
-- The new index holds sequence jobs only. Every statement that reads it
-- compares (meta ->> 'hopper.sequence') with a key, which implies the key
-- IS NOT NULL, so PostgreSQL still proves it usable for them; the
-- workflow functions' look-ups cannot use it and take the primary key.
--
-- The table is locked ACCESS EXCLUSIVE first, for the whole build: CREATE
-- INDEX's SHARE lock followed by DROP INDEX's ACCESS EXCLUSIVE one is a
-- lock upgrade, which deadlocks with a worker's transaction that read the
-- table and then writes it (seen in tests/upgrade). Taken first, the lock
-- is only waited for (lock_timeout, then the migration runs again); reads
-- and writes wait for the build, which reads the table but indexes only
-- the waiting sequence jobs (0.11 s for 1,000,000 pending jobs). Guarded
-- by: schema/TestSequenceWaitingIndexHoldsSequencesOnly.
LOCK TABLE hopper_jobs IN ACCESS EXCLUSIVE MODE;
CREATE INDEX hopper_jobs_sequence_waiting_key_idx ON hopper_jobs ((meta ->> 'hopper.sequence'), id)
    WHERE state = 'waiting' AND (meta ->> 'hopper.sequence') IS NOT NULL;
DROP INDEX hopper_jobs_sequence_waiting_idx;
ALTER INDEX hopper_jobs_sequence_waiting_key_idx RENAME TO hopper_jobs_sequence_waiting_idx;

-- 2. A parent's end counts its waiting children down (hopper_workflow_pass)
-- without searching the array of its children once per child: the search
-- made each pass quadratic in its children. The function's settings (jit
-- off, generic plans: migrations 15 and 24) are restated, since CREATE OR
-- REPLACE sets them anew. Guarded by the workflow suites (workflows_test,
-- workflow_edges_test, the workflow chaos and property tests).
CREATE OR REPLACE FUNCTION hopper_workflow_pass(ended bigint[]) RETURNS bigint[]
LANGUAGE plpgsql VOLATILE
SET jit = off SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    children bigint[];
    ready bigint[];
BEGIN
    SELECT array_agg(l.id) INTO children
    FROM (SELECT j.id FROM hopper_jobs AS j
          WHERE j.id IN (SELECT d.child_id FROM hopper_workflow_deps AS d WHERE d.parent_id = ANY (ended))
            AND j.state = 'waiting'
          ORDER BY j.id
          FOR NO KEY UPDATE OF j) AS l;
    -- How each ended step ended, on all its edges (whatever its children's
    -- states: a child cancelled or kept may be retried later, and then
    -- reads it): an ended step in the dead table failed; one that
    -- completed after an earlier failure (it was retried) forgets it.
    -- Only the edges whose failure changes are written, and a plain
    -- acknowledgement reads no edge: the dead table's key finds the
    -- failed, the partial index of failures the ones to forget.
    UPDATE hopper_workflow_deps AS d
    SET parent_failed = x.state
    FROM hopper_dead_jobs AS x
    WHERE x.id = ANY (ended) AND d.parent_id = x.id AND d.parent_failed IS DISTINCT FROM x.state;
    UPDATE hopper_workflow_deps AS d
    SET parent_failed = NULL
    WHERE d.parent_id = ANY (ended) AND d.parent_failed IS NOT NULL
      AND NOT EXISTS (SELECT FROM hopper_dead_jobs AS x WHERE x.id = d.parent_id);
    IF children IS NULL THEN
        RETURN NULL;
    END IF;
    -- The edges are read from the ended parents (the primary key), never
    -- from the children: a batch's callback has a hundred thousand. Of
    -- the children, only the waiting ones count: those locked above (a
    -- child cancelled, dead or completed before does not wait), found by
    -- an index probe each rather than a search of the array per child,
    -- which made a pass quadratic in its children (3 µs a child at a
    -- thousand). The two sets are the same: the rows locked stay waiting,
    -- and no step comes back waiting with an edge to a parent ended here
    -- before this commit (its count locks that parent, FOR KEY SHARE,
    -- which waits for this transaction's delete). A child with a count
    -- row (several parents) is ready when it reaches zero; one without (a
    -- single parent, which has just ended) is ready now. The NOT EXISTS
    -- reads the rows as they were before the update.
    WITH counted AS (
        SELECT g.child_id, g.n
        FROM (SELECT d.child_id, count(*)::integer AS n
              FROM hopper_workflow_deps AS d
              WHERE d.parent_id = ANY (ended)
              GROUP BY d.child_id) AS g
        WHERE EXISTS (SELECT FROM hopper_jobs AS j WHERE j.id = g.child_id AND j.state = 'waiting')
    ), left_now AS (
        UPDATE hopper_workflow_waits AS w
        SET parents_left = greatest(w.parents_left - c.n, 0)
        FROM counted AS c
        WHERE w.child_id = c.child_id
        RETURNING w.child_id, w.parents_left
    )
    SELECT array_agg(r.child_id) INTO ready
    FROM (SELECT l.child_id FROM left_now AS l WHERE l.parents_left = 0
          UNION ALL
          SELECT c.child_id FROM counted AS c
          WHERE NOT EXISTS (SELECT FROM hopper_workflow_waits AS w WHERE w.child_id = c.child_id)) AS r;
    RETURN hopper_workflow_decide(ready);
END;
$$;

-- 3. A step's end looks for it in the history and the dead jobs (is it
-- kept, so that its edges to its parents stay?) only when it has parents:
-- those look-ups by id read every partition's primary key, and a batch's
-- jobs and a workflow's roots have no such edges (acknowledging 20,000
-- jobs of a batch with 25 history partitions: 20 µs a job before, 16
-- after). Settings restated as above.
CREATE OR REPLACE FUNCTION hopper_workflow_advance() RETURNS trigger
LANGUAGE plpgsql VOLATILE
SET jit = off SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    setting constant text := 'hopper.workflow_cascade_' || TG_RELID::text;
    ended bigint[];
    unpromoted bigint[];
BEGIN
    IF current_setting(setting, true) = 'on' THEN
        RETURN NULL;
    END IF;
    SELECT array_agg(o.id), array_agg(o.id) FILTER (WHERE o.state = 'waiting') INTO ended, unpromoted
    FROM hopper_old_jobs AS o
    WHERE o.meta ? 'hopper.workflow';
    IF ended IS NULL THEN
        RETURN NULL;
    END IF;
    -- A step that ended waiting (cancelled, deleted) needs its count no
    -- more. Its row is this statement's (deleted), and every writer of a
    -- count locks the step's row first, so none holds the count now.
    IF unpromoted IS NOT NULL THEN
        DELETE FROM hopper_workflow_waits AS w WHERE w.child_id = ANY (unpromoted);
    END IF;
    -- A step that ended without being kept (deleted; or completed, not
    -- kept in the history) needs its edges to its parents no more; a kept
    -- one keeps them until its row is pruned or purged. Only a step with
    -- parents has such edges: the others (a workflow's roots, a batch's
    -- jobs) are not looked for in the history and the dead jobs, whose
    -- look-up by id reads every partition's key.
    DELETE FROM hopper_workflow_deps AS d
    WHERE d.child_id IN (SELECT e FROM unnest(ended) AS e
                         WHERE EXISTS (SELECT FROM hopper_workflow_deps AS p WHERE p.child_id = e)
                           AND NOT EXISTS (SELECT FROM hopper_job_history AS h WHERE h.id = e)
                           AND NOT EXISTS (SELECT FROM hopper_dead_jobs AS x WHERE x.id = e));
    PERFORM set_config(setting, 'on', true);
    WHILE ended IS NOT NULL LOOP
        ended := hopper_workflow_pass(ended);
    END LOOP;
    PERFORM set_config(setting, '', true);
    RETURN NULL;
END;
$$;

-- 4. Every function that reads or writes Hopper's tables by name runs with
-- this schema first in its search_path, whatever the caller's, so that a
-- session that reaches the tables by a qualified name (another
-- search_path) runs the triggers on the same schema's tables. Migrations
-- 13 and 14 pinned them; CREATE OR REPLACE sets a function's settings
-- anew, so migration 15 lost the pin of hopper_workflow_decide,
-- hopper_workflow_pass, hopper_workflow_returned and hopper_sequence_skip,
-- this migration that of hopper_workflow_advance, and migration 18 never
-- set it on hopper_emit_event and hopper_durable_ended. Guarded by:
-- schema/TestFunctionsPinSearchPath.
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION %1$I.hopper_workflow_advance() SET search_path = %1$I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION %1$I.hopper_workflow_pass(bigint[]) SET search_path = %1$I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION %1$I.hopper_workflow_decide(bigint[]) SET search_path = %1$I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION %1$I.hopper_workflow_returned() SET search_path = %1$I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION %1$I.hopper_sequence_skip(text) SET search_path = %1$I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION %1$I.hopper_emit_event(text, jsonb) SET search_path = %1$I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION %1$I.hopper_durable_ended() SET search_path = %1$I, pg_temp', current_schema());
END
$$;
