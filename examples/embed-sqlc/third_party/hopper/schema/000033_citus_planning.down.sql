-- Undoes 000033: the seven functions as they were, now() inside the
-- CASE again, and the transition tables read beside the tables.

CREATE OR REPLACE FUNCTION hopper_sequence_promote(sequence_key text) RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_variable
DECLARE
    next record;
BEGIN
    FOR round IN 1..100 LOOP
        UPDATE hopper_jobs AS j
        SET state = CASE WHEN j.run_at > now() THEN 'scheduled' ELSE 'pending' END,
            run_at = greatest(j.run_at, now())
        WHERE j.id = (SELECT w.id FROM hopper_jobs AS w
                      WHERE (w.meta ->> 'hopper.sequence') = sequence_key AND w.state = 'waiting'
                      ORDER BY w.id
                      LIMIT 1)
          AND j.state = 'waiting'
        RETURNING j.id, j.queue, j.state, j.priority, j.run_at INTO next;
        IF FOUND THEN
            -- The wake-up names the job's place in claim order, as Notify
            -- does.
            IF next.state = 'pending' THEN
                PERFORM pg_notify('hopper_jobs', json_build_object(
                    'schema', current_schema(), 'queue', next.queue,
                    'priority', next.priority, 'run_at', next.run_at, 'id', next.id)::text);
            END IF;
            RETURN next.id;
        END IF;
        IF NOT EXISTS (SELECT FROM hopper_jobs AS w
                       WHERE (w.meta ->> 'hopper.sequence') = sequence_key AND w.state = 'waiting') THEN
            RETURN NULL;
        END IF;
    END LOOP;
    RAISE EXCEPTION 'hopper: sequence %: could not promote its next job in 100 rounds', sequence_key;
END;
$$;

CREATE OR REPLACE FUNCTION hopper_sequence_promote_keys(keys text[]) RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    done text[];
    missed text;
BEGIN
    WITH promoted AS (
        UPDATE hopper_jobs AS j
        SET state = CASE WHEN j.run_at > now() THEN 'scheduled' ELSE 'pending' END,
            run_at = greatest(j.run_at, now())
        FROM (SELECT f.id
              FROM unnest(keys) AS k(key)
              CROSS JOIN LATERAL (SELECT w.id FROM hopper_jobs AS w
                                  WHERE (w.meta ->> 'hopper.sequence') = k.key AND w.state = 'waiting'
                                  ORDER BY w.id
                                  LIMIT 1) AS f
              ORDER BY f.id) AS next
        WHERE j.id = next.id AND j.state = 'waiting'
        RETURNING j.id, j.queue, j.state, j.priority, j.run_at, j.meta ->> 'hopper.sequence' AS key
    ), woken AS (
        SELECT count(pg_notify('hopper_jobs', json_build_object(
                   'schema', current_schema(), 'queue', q.queue,
                   'priority', q.priority, 'run_at', q.run_at, 'id', q.id)::text)) AS sent
        FROM (SELECT p.queue, min(p.priority) AS priority, min(p.run_at) AS run_at, min(p.id) AS id
              FROM promoted AS p
              WHERE p.state = 'pending'
              GROUP BY p.queue) AS q
    )
    SELECT coalesce(array_agg(p.key), '{}') INTO done
    FROM promoted AS p
    CROSS JOIN woken
    WHERE woken.sent >= 0;
    FOR missed IN
        SELECT k.key FROM (SELECT unnest(keys) EXCEPT SELECT unnest(done)) AS k(key)
        WHERE EXISTS (SELECT FROM hopper_jobs AS w WHERE (w.meta ->> 'hopper.sequence') = k.key AND w.state = 'waiting')
          AND NOT EXISTS (SELECT FROM hopper_jobs AS h
                          WHERE (h.meta ->> 'hopper.sequence') = k.key AND h.state <> 'waiting' AND h.meta ? 'hopper.sequence')
    LOOP
        PERFORM hopper_sequence_promote(missed);
    END LOOP;
END;
$$;

CREATE OR REPLACE FUNCTION hopper_workflow_decide(ready bigint[]) RETURNS bigint[]
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    go bigint[];
    doomed bigint[];
    held bigint[];
    cancelled bigint[];
    woken bigint;
BEGIN
    IF ready IS NULL OR cardinality(ready) = 0 THEN
        RETURN NULL;
    END IF;
    SELECT array_agg(v.id) FILTER (WHERE v.failed IS NULL OR v.policy = 'run'),
           array_agg(v.id) FILTER (WHERE v.failed IS NOT NULL AND v.policy <> 'run'
                                     AND (v.policy = 'cancel' OR v.failed = 'purged')),
           array_agg(v.id) FILTER (WHERE v.failed = 'kept' AND v.policy = 'wait')
    INTO go, doomed, held
    FROM (SELECT j.id, coalesce(j.meta ->> 'hopper.workflow_policy', 'cancel') AS policy,
                 (SELECT CASE WHEN bool_or(NOT EXISTS (SELECT FROM hopper_dead_jobs AS x WHERE x.id = d.parent_id)
                                          AND NOT EXISTS (SELECT FROM hopper_jobs AS p WHERE p.id = d.parent_id))
                              THEN 'purged' ELSE 'kept' END
                  FROM hopper_workflow_deps AS d
                  WHERE d.child_id = j.id AND d.parent_failed IS NOT NULL
                  HAVING count(*) > 0) AS failed
          FROM hopper_jobs AS j
          WHERE j.id = ANY (ready) AND j.state = 'waiting'
          OFFSET 0) AS v; -- OFFSET 0: each subquery runs once, not once per FILTER

    IF go IS NOT NULL THEN
        WITH promoted AS (
            UPDATE hopper_jobs AS j
            SET state = CASE WHEN j.run_at > now() THEN 'scheduled' ELSE 'pending' END,
                run_at = greatest(j.run_at, now())
            WHERE j.id = ANY (go) AND j.state = 'waiting'
            RETURNING j.id, j.queue, j.state, j.priority, j.run_at
        )
        -- The wake-up names the place in claim order of each queue's
        -- first promoted job, as Notify does.
        SELECT count(pg_notify('hopper_jobs', json_build_object(
                   'schema', current_schema(), 'queue', q.queue,
                   'priority', q.priority, 'run_at', q.run_at, 'id', q.id)::text)) INTO woken
        FROM (SELECT p.queue, min(p.priority) AS priority, min(p.run_at) AS run_at, min(p.id) AS id
              FROM promoted AS p
              WHERE p.state = 'pending'
              GROUP BY p.queue) AS q;
    END IF;

    IF doomed IS NOT NULL THEN
        WITH removed AS (
            DELETE FROM hopper_jobs AS j
            WHERE j.id = ANY (doomed) AND j.state = 'waiting'
            RETURNING j.*
        ), buried AS (
            INSERT INTO hopper_dead_jobs (id, queue, kind, version, payload, priority, attempt, max_attempts,
                                          unique_key, errors, reason, created_at, run_at, state, meta, concurrency_key)
            SELECT r.id, r.queue, r.kind, r.version, r.payload, r.priority, r.attempt, r.max_attempts,
                   r.unique_key, r.errors,
                   'parent ' || f.parent_id || ' ended ' || f.parent_failed
                   || CASE WHEN f.gone THEN ' and was purged' ELSE '' END,
                   r.created_at, r.run_at, 'cancelled', r.meta, r.concurrency_key
            FROM removed AS r
            CROSS JOIN LATERAL (SELECT d.parent_id, d.parent_failed,
                                       NOT EXISTS (SELECT FROM hopper_dead_jobs AS x WHERE x.id = d.parent_id)
                                       AND NOT EXISTS (SELECT FROM hopper_jobs AS p WHERE p.id = d.parent_id) AS gone
                                FROM hopper_workflow_deps AS d
                                WHERE d.child_id = r.id AND d.parent_failed IS NOT NULL
                                ORDER BY 3 DESC, d.parent_id
                                LIMIT 1) AS f
            RETURNING id
        )
        SELECT array_agg(b.id) INTO cancelled FROM buried AS b;
    END IF;

    -- A step that waits for an operator keeps its count (zero) for the
    -- retry of its parent to raise; the others need it no more.
    DELETE FROM hopper_workflow_waits AS w
    WHERE w.child_id = ANY (ready) AND NOT w.child_id = ANY (coalesce(held, '{}'));
    RETURN cancelled;
END;
$$;

CREATE OR REPLACE FUNCTION hopper_sequence_advance() RETURNS trigger
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    keys text[];
BEGIN
    SELECT array_agg(DISTINCT o.meta ->> 'hopper.sequence') INTO keys
    FROM hopper_old_jobs AS o
    WHERE o.state <> 'waiting' AND o.meta ? 'hopper.sequence';
    IF keys IS NULL THEN
        RETURN NULL;
    END IF;
    INSERT INTO hopper_sequence_blocks (sequence_key, job_id, queue, kind, state, reason)
    SELECT o.meta ->> 'hopper.sequence', o.id, o.queue, o.kind, d.state, d.reason
    FROM hopper_old_jobs AS o
    JOIN hopper_dead_jobs AS d ON d.id = o.id
    WHERE o.state <> 'waiting' AND o.meta ? 'hopper.sequence'
      AND coalesce(o.meta ->> 'hopper.sequence_policy', 'block') = 'block'
    ORDER BY 1
    ON CONFLICT (sequence_key) DO NOTHING;
    SELECT array_agg(k) INTO keys
    FROM unnest(keys) AS k
    WHERE NOT EXISTS (SELECT FROM hopper_sequence_blocks AS b WHERE b.sequence_key = k);
    IF keys IS NOT NULL THEN
        PERFORM hopper_sequence_promote_keys(keys);
    END IF;
    RETURN NULL;
END;
$$;

CREATE OR REPLACE FUNCTION hopper_workflow_returned() RETURNS trigger
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    back bigint[];
    waiting bigint[];
BEGIN
    -- Inserts of jobs of no workflow stop here, without reading (or
    -- needing a grant on) the workflow tables: a role that only enqueues
    -- plain jobs needs none.
    IF NOT EXISTS (SELECT FROM hopper_new_jobs AS n WHERE n.meta ? 'hopper.workflow') THEN
        RETURN NULL;
    END IF;
    SELECT array_agg(n.id) INTO back
    FROM hopper_new_jobs AS n
    WHERE n.meta ? 'hopper.workflow'
      AND EXISTS (SELECT FROM hopper_workflow_deps AS d WHERE d.parent_id = n.id);
    IF back IS NOT NULL THEN
        PERFORM count(*)
        FROM (SELECT j.id FROM hopper_jobs AS j
              WHERE j.id IN (SELECT d.child_id FROM hopper_workflow_deps AS d WHERE d.parent_id = ANY (back))
                AND j.state = 'waiting'
              ORDER BY j.id
              FOR NO KEY UPDATE OF j) AS l;
        UPDATE hopper_workflow_waits AS w
        SET parents_left = w.parents_left + c.n
        FROM (SELECT d.child_id, count(*)::integer AS n
              FROM hopper_workflow_deps AS d
              JOIN hopper_jobs AS j ON j.id = d.child_id AND j.state = 'waiting'
              WHERE d.parent_id = ANY (back)
              GROUP BY d.child_id) AS c
        WHERE w.child_id = c.child_id;
    END IF;
    SELECT array_agg(DISTINCT n.id) INTO waiting
    FROM hopper_new_jobs AS n
    WHERE n.meta ? 'hopper.workflow' AND n.state = 'waiting'
      AND EXISTS (SELECT FROM hopper_workflow_deps AS d WHERE d.child_id = n.id);
    IF waiting IS NOT NULL THEN
        PERFORM hopper_workflow_count(waiting);
    END IF;
    RETURN NULL;
END;
$$;

CREATE OR REPLACE FUNCTION hopper_workflow_link(parents bigint[], children bigint[]) RETURNS integer
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    stranger record;
    decided integer;
    edge_parents bigint[];
    edge_children bigint[];
    workflows text[];
BEGIN
    PERFORM hopper_require_read_committed('linking workflow steps');
    IF cardinality(parents) IS DISTINCT FROM cardinality(children) OR array_position(parents, NULL) IS NOT NULL
       OR array_position(children, NULL) IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = 'hopper: workflow edges: ' || coalesce(cardinality(parents), 0) || ' parents for '
                      || coalesce(cardinality(children), 0) || ' children, or a NULL among them';
    END IF;
    SELECT e.p, e.c INTO stranger
    FROM unnest(parents, children) AS e(p, c)
    LEFT JOIN hopper_jobs AS c ON c.id = e.c
    WHERE e.p = e.c OR c.id IS NULL OR c.state <> 'waiting' OR NOT c.meta ? 'hopper.workflow'
    LIMIT 1;
    IF NOT FOUND THEN
        SELECT array_agg(e.p ORDER BY e.p, e.c), array_agg(e.c ORDER BY e.p, e.c),
               array_agg(c.meta ->> 'hopper.workflow' ORDER BY e.p, e.c)
        INTO edge_parents, edge_children, workflows
        FROM (SELECT DISTINCT p, c FROM unnest(parents, children) AS u(p, c)) AS e
        JOIN hopper_jobs AS c ON c.id = e.c;
        INSERT INTO hopper_workflow_deps (parent_id, child_id)
        SELECT e.p, e.c FROM unnest(edge_parents, edge_children) AS e(p, c)
        ON CONFLICT DO NOTHING;
        decided := hopper_workflow_count(ARRAY(SELECT DISTINCT c FROM unnest(edge_children) AS c ORDER BY 1));
        SELECT e.p, e.c INTO stranger
        FROM unnest(edge_parents, edge_children, workflows) AS e(p, c, w)
        WHERE NOT EXISTS (SELECT FROM hopper_jobs AS j
                          WHERE j.id = e.p AND j.meta ? 'hopper.workflow' AND (j.meta ->> 'hopper.workflow') = e.w)
          AND NOT EXISTS (SELECT FROM hopper_dead_jobs AS x
                          WHERE x.id = e.p AND x.meta ? 'hopper.workflow' AND (x.meta ->> 'hopper.workflow') = e.w)
          AND NOT EXISTS (SELECT FROM hopper_job_history AS h
                          WHERE h.id = e.p AND h.meta ? 'hopper.workflow' AND (h.meta ->> 'hopper.workflow') = e.w)
        LIMIT 1;
    END IF;
    IF FOUND THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = 'hopper: unknown step: job ' || stranger.p || ' is no step of the workflow of job ' || stranger.c,
            HINT = 'a step''s parents are steps of its own workflow, in this schema, and the step waits for them';
    END IF;
    RETURN decided;
END;
$$;

CREATE OR REPLACE FUNCTION hopper_workflow_count(children bigint[]) RETURNS integer
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    parents bigint[];
    dead bigint[];
    live bigint[];
    ready bigint[];
BEGIN
    PERFORM hopper_require_read_committed('counting a workflow step''s parents');
    SELECT coalesce(array_agg(DISTINCT d.parent_id), '{}') INTO parents
    FROM hopper_workflow_deps AS d
    WHERE d.child_id = ANY (children);
    -- Dead parents first: a retry that is bringing one back (its row
    -- locked) is waited for, and the live parents, read next with a fresh
    -- snapshot, then include it; a retry that comes after waits for this
    -- commit, and its trigger then counts it for these children. A parent
    -- that died while this waited for its live row is in the dead table
    -- now, unlocked: lock it in another round, until every parent still
    -- in either table is locked (the two counts match).
    dead := '{}';
    live := '{}';
    FOR round IN 1..100 LOOP
        SELECT dead || coalesce(array_agg(l.id), '{}') INTO dead
        FROM (SELECT x.id FROM hopper_dead_jobs AS x
              WHERE x.id = ANY (parents) AND (round = 1 OR NOT x.id = ANY (dead))
              ORDER BY x.id
              FOR KEY SHARE OF x) AS l;
        SELECT live || coalesce(array_agg(l.id), '{}') INTO live
        FROM (SELECT j.id FROM hopper_jobs AS j
              WHERE j.id = ANY (parents) AND (round = 1 OR NOT j.id = ANY (live))
              ORDER BY j.id
              FOR KEY SHARE OF j) AS l;
        EXIT WHEN (SELECT count(*) FROM hopper_dead_jobs AS x WHERE x.id = ANY (parents))
                  + (SELECT count(*) FROM hopper_jobs AS j WHERE j.id = ANY (parents))
                  = cardinality(dead) + cardinality(live);
        IF round = 100 THEN
            RAISE EXCEPTION 'hopper: workflows: the parents of % kept moving while this transaction locked them', children;
        END IF;
    END LOOP;
    SELECT array_agg(l.id) INTO ready
    FROM (SELECT j.id FROM hopper_jobs AS j
          WHERE j.id = ANY (children) AND j.state = 'waiting'
          ORDER BY j.id
          FOR NO KEY UPDATE OF j) AS l;
    -- A step that already waited (a parent added to it) may have been
    -- decided while this waited for its parents' locks: its last parent
    -- ended in a transaction that could not see the new edge. It cannot
    -- wait for the new parent any more: refused, as a step that was not
    -- waiting at all is.
    IF coalesce(cardinality(ready), 0) < (SELECT count(DISTINCT c) FROM unnest(children) AS c) THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = 'hopper: unknown step: job ' || (SELECT min(c) FROM unnest(children) AS c WHERE NOT c = ANY (coalesce(ready, '{}')))
                      || ' no longer waits: its parents ended while it was being given another',
            HINT = 'a parent can be added only to a step that still waits for one';
    END IF;
    ready := NULL;
    -- A new edge to a dead parent takes its failure (a live parent's
    -- edge is read only once it has ended, and its end writes it).
    UPDATE hopper_workflow_deps AS d
    SET parent_failed = x.state
    FROM hopper_dead_jobs AS x
    WHERE d.child_id = ANY (children) AND x.id = ANY (dead) AND d.parent_id = x.id
      AND d.parent_failed IS DISTINCT FROM x.state;
    -- A step of one parent has no count row: its parent's end is its
    -- turn (hopper_workflow_pass). The parents live now are those locked
    -- live (locked, none can leave, and none can come back unlocked): an
    -- index probe each, rather than a search of the array per edge (a
    -- batch's callback has a hundred thousand).
    WITH counted AS (
        SELECT d.child_id AS c, count(*)::integer AS parents,
               count(*) FILTER (WHERE EXISTS (SELECT FROM hopper_jobs AS p WHERE p.id = d.parent_id))::integer AS parents_left
        FROM hopper_workflow_deps AS d
        JOIN hopper_jobs AS j ON j.id = d.child_id AND j.state = 'waiting'
        WHERE d.child_id = ANY (children)
        GROUP BY d.child_id
    ), stored AS (
        INSERT INTO hopper_workflow_waits (child_id, parents_left)
        SELECT c.c, c.parents_left
        FROM counted AS c
        WHERE c.parents > 1
        ORDER BY c.c
        ON CONFLICT (child_id) DO UPDATE SET parents_left = excluded.parents_left
    )
    SELECT array_agg(c.c) INTO ready FROM counted AS c WHERE c.parents_left = 0;
    IF ready IS NULL THEN
        RETURN 0;
    END IF;
    -- The children of steps cancelled here are counted down by the
    -- delete's trigger (this is no trigger: its deletes fire it).
    PERFORM hopper_workflow_decide(ready);
    RETURN cardinality(ready);
END;
$$;

-- CREATE OR REPLACE sets a function's settings anew: they are restated.
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION %1$I.hopper_sequence_promote(text) SET search_path = %1$I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION %1$I.hopper_sequence_promote_keys(text[]) SET search_path = %1$I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION %1$I.hopper_workflow_decide(bigint[]) SET search_path = %1$I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION %1$I.hopper_sequence_advance() SET search_path = %1$I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION %1$I.hopper_workflow_returned() SET search_path = %1$I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION %1$I.hopper_workflow_link(bigint[], bigint[]) SET search_path = %1$I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION %1$I.hopper_workflow_count(bigint[]) SET search_path = %1$I, pg_temp', current_schema());
END
$$;
ALTER FUNCTION hopper_workflow_decide(bigint[]) SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION hopper_sequence_advance() SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION hopper_workflow_returned() SET jit = off;
ALTER FUNCTION hopper_workflow_link(bigint[], bigint[]) SET jit = off;
ALTER FUNCTION hopper_workflow_link(bigint[], bigint[]) SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION hopper_workflow_count(bigint[]) SET jit = off;
ALTER FUNCTION hopper_workflow_count(bigint[]) SET plan_cache_mode = force_generic_plan;
