-- Migration 13's index again: every waiting job, workflow steps included.
-- Locked first, as the up does, so that no lock is upgraded.
LOCK TABLE hopper_jobs IN ACCESS EXCLUSIVE MODE;
CREATE INDEX hopper_jobs_sequence_waiting_all_idx ON hopper_jobs ((meta ->> 'hopper.sequence'), id)
    WHERE state = 'waiting';
DROP INDEX hopper_jobs_sequence_waiting_idx;
ALTER INDEX hopper_jobs_sequence_waiting_all_idx RENAME TO hopper_jobs_sequence_waiting_idx;

-- Migration 15's count-down, with the settings of migrations 15 and 24.
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
    -- from the children: a batch's callback has a hundred thousand. A
    -- child with a count row (several parents) is ready when it reaches
    -- zero; one without (a single parent, which has just ended) is ready
    -- now. The NOT EXISTS reads the rows as they were before the update.
    WITH counted AS (
        SELECT d.child_id, count(*)::integer AS n
        FROM hopper_workflow_deps AS d
        WHERE d.parent_id = ANY (ended)
        GROUP BY d.child_id
    ), left_now AS (
        UPDATE hopper_workflow_waits AS w
        SET parents_left = greatest(w.parents_left - c.n, 0)
        FROM counted AS c
        WHERE w.child_id = c.child_id AND c.child_id = ANY (children)
        RETURNING w.child_id, w.parents_left
    )
    SELECT array_agg(r.child_id) INTO ready
    FROM (SELECT l.child_id FROM left_now AS l WHERE l.parents_left = 0
          UNION ALL
          SELECT c.child_id FROM counted AS c
          WHERE c.child_id = ANY (children)
            AND NOT EXISTS (SELECT FROM hopper_workflow_waits AS w WHERE w.child_id = c.child_id)) AS r;
    RETURN hopper_workflow_decide(ready);
END;
$$;

-- Migration 14's end of a step, with the settings of migrations 15 and 24.
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
    -- one keeps them until its row is pruned or purged.
    DELETE FROM hopper_workflow_deps AS d
    WHERE d.child_id IN (SELECT e FROM unnest(ended) AS e
                         WHERE NOT EXISTS (SELECT FROM hopper_job_history AS h WHERE h.id = e)
                           AND NOT EXISTS (SELECT FROM hopper_dead_jobs AS x WHERE x.id = e));
    PERFORM set_config(setting, 'on', true);
    WHILE ended IS NOT NULL LOOP
        ended := hopper_workflow_pass(ended);
    END LOOP;
    PERFORM set_config(setting, '', true);
    RETURN NULL;
END;
$$;

-- The search_path as migration 24 left it: pinned on
-- hopper_workflow_advance only (hopper_workflow_pass's CREATE OR REPLACE
-- above leaves it unpinned, as it was).
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION %1$I.hopper_workflow_advance() SET search_path = %1$I, pg_temp', current_schema());
END
$$;
ALTER FUNCTION hopper_workflow_decide(bigint[]) RESET search_path;
ALTER FUNCTION hopper_workflow_returned() RESET search_path;
ALTER FUNCTION hopper_sequence_skip(text) RESET search_path;
ALTER FUNCTION hopper_emit_event(text, jsonb) RESET search_path;
ALTER FUNCTION hopper_durable_ended() RESET search_path;
