-- Functions that run in a trigger on the node of a distributed schema,
-- written so that Citus can plan each of their statements.
--
-- On Citus (docs/scaling-out.md) every node holds the metadata of every
-- distributed table, so a statement in a trigger function on the node of a
-- shard's schema is planned by Citus like one sent to the coordinator.
-- Citus refuses two shapes of statement there; this migration rewrites
-- every function that had one, and on plain PostgreSQL each does the same
-- as before.
--
-- 1. The clock inside a CASE. Citus refuses an UPDATE or INSERT of a
-- distributed table whose SET list calls a function that is not immutable
-- inside a CASE or COALESCE ("non-IMMUTABLE functions are not allowed in
-- CASE or COALESCE statements"): it evaluates such functions before it
-- sends the statement to the shard, and cannot tell whether a CASE's
-- branch would run. Every enqueue of a sequence job, and every
-- acknowledgement that passes a sequence's or a workflow's turn, failed so
-- on a distributed schema. The sequence and workflow functions that make a
-- job's turn come (hopper_sequence_promote, hopper_sequence_promote_keys,
-- hopper_workflow_decide) read the clock once, into a variable: a PL/pgSQL
-- variable is a parameter of the statement, which Citus takes as a
-- constant. now() is the transaction's start in both places, so the same
-- jobs become pending or scheduled, with the same run_at.
--
-- 2. A transition table beside a table. Citus cannot plan a statement
-- that reads a statement trigger's transition table (REFERENCING OLD or
-- NEW TABLE: a named tuplestore to the planner) together with a
-- distributed table ("unrecognized RTE kind: 7"); one that reads the
-- transition table alone it leaves to PostgreSQL. Every acknowledgement
-- of a sequence's job (hopper_sequence_advance joined the deleted rows to
-- the dead jobs) and every insert of a workflow's job
-- (hopper_workflow_returned looked its new rows up in the edges) failed
-- so. Those two read the transition table alone first, into arrays, one
-- statement per table, and then the tables with the arrays (unnest,
-- = ANY), as the other trigger functions already do. The arrays hold ids
-- and a few short columns of the statement's rows: a batch of thousands
-- of jobs makes arrays of thousands of elements, read once.
--
-- 3. An INSERT … SELECT with parameters in a generic plan. Citus cannot
-- plan one ("could not create distributed plan"), and the functions that
-- read the history or the dead jobs by id make generic plans (migration
-- 24). hopper_sequence_advance, hopper_workflow_link and
-- hopper_workflow_count insert from their
-- arrays by EXECUTE … USING instead: a statement planned at each call,
-- whose SELECT reads only the arrays (Citus deparses one that joins a
-- table of the shard wrongly), while their look-ups keep their generic
-- plans. Planning an INSERT from unnest takes microseconds.

CREATE OR REPLACE FUNCTION hopper_sequence_promote(sequence_key text) RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_variable
DECLARE
    -- now(), read once: see the migration's note (1)
    clock timestamptz := now();
    next record;
BEGIN
    FOR round IN 1..100 LOOP
        UPDATE hopper_jobs AS j
        SET state = CASE WHEN j.run_at > clock THEN 'scheduled' ELSE 'pending' END,
            run_at = greatest(j.run_at, clock)
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
    -- now(), read once: see the migration's note (1)
    clock timestamptz := now();
    done text[];
    missed text;
BEGIN
    WITH promoted AS (
        UPDATE hopper_jobs AS j
        SET state = CASE WHEN j.run_at > clock THEN 'scheduled' ELSE 'pending' END,
            run_at = greatest(j.run_at, clock)
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
    -- now(), read once: see the migration's note (1)
    clock timestamptz := now();
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
            SET state = CASE WHEN j.run_at > clock THEN 'scheduled' ELSE 'pending' END,
                run_at = greatest(j.run_at, clock)
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

-- hopper_sequence_advance: the heads that ended and block their key are
-- read from the deleted rows first, with the keys (see the note, 2).
--
-- When heads leave the job table (one call per deleting statement, over
-- the rows it deleted: an acknowledgement batch of a thousand heads is a
-- handful of set-based statements, not a thousand calls): a head that
-- completed (acked, deleted) passes the turn to the next job of its key;
-- one that ended dead or cancelled (the statement that deleted it wrote it
-- to hopper_dead_jobs, which this trigger, fired at the statement's end,
-- sees) blocks its key under the block policy, or passes the turn under
-- continue. Deletes without a head of a sequence return at the first
-- statement.
CREATE OR REPLACE FUNCTION hopper_sequence_advance() RETURNS trigger
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    keys text[];
    heads bigint[];
    head_keys text[];
    head_queues text[];
    head_kinds text[];
    head_states text[];
    head_reasons text[];
BEGIN
    SELECT array_agg(DISTINCT o.meta ->> 'hopper.sequence'),
           array_agg(o.id) FILTER (WHERE coalesce(o.meta ->> 'hopper.sequence_policy', 'block') = 'block'),
           array_agg(o.meta ->> 'hopper.sequence') FILTER (WHERE coalesce(o.meta ->> 'hopper.sequence_policy', 'block') = 'block'),
           array_agg(o.queue) FILTER (WHERE coalesce(o.meta ->> 'hopper.sequence_policy', 'block') = 'block'),
           array_agg(o.kind) FILTER (WHERE coalesce(o.meta ->> 'hopper.sequence_policy', 'block') = 'block')
    INTO keys, heads, head_keys, head_queues, head_kinds
    FROM hopper_old_jobs AS o
    WHERE o.state <> 'waiting' AND o.meta ? 'hopper.sequence';
    IF keys IS NULL THEN
        RETURN NULL;
    END IF;
    -- A head under the block policy that the statement wrote to the dead
    -- jobs blocks its key. Its dead row is read into arrays first, then
    -- inserted from them by a statement planned at each call (EXECUTE; see
    -- the note, 3).
    IF heads IS NOT NULL THEN
        SELECT array_agg(h.key ORDER BY h.key, h.id), array_agg(h.id ORDER BY h.key, h.id),
               array_agg(h.queue ORDER BY h.key, h.id), array_agg(h.kind ORDER BY h.key, h.id),
               array_agg(d.state ORDER BY h.key, h.id), array_agg(d.reason ORDER BY h.key, h.id)
        INTO head_keys, heads, head_queues, head_kinds, head_states, head_reasons
        FROM unnest(heads, head_keys, head_queues, head_kinds) AS h(id, key, queue, kind)
        JOIN hopper_dead_jobs AS d ON d.id = h.id;
        IF heads IS NOT NULL THEN
            EXECUTE 'INSERT INTO hopper_sequence_blocks (sequence_key, job_id, queue, kind, state, reason)
                     SELECT b.key, b.id, b.queue, b.kind, b.state, b.reason
                     FROM unnest($1, $2, $3, $4, $5, $6) AS b(key, id, queue, kind, state, reason)
                     ORDER BY 1
                     ON CONFLICT (sequence_key) DO NOTHING'
                USING head_keys, heads, head_queues, head_kinds, head_states, head_reasons;
        END IF;
    END IF;
    SELECT array_agg(k) INTO keys
    FROM unnest(keys) AS k
    WHERE NOT EXISTS (SELECT FROM hopper_sequence_blocks AS b WHERE b.sequence_key = k);
    IF keys IS NOT NULL THEN
        PERFORM hopper_sequence_promote_keys(keys);
    END IF;
    RETURN NULL;
END;
$$;

-- hopper_workflow_returned: the new rows' ids are read first (see the
-- note, 2), and looked up in the edges from the arrays.
--
-- Steps that come back from the dead table (a retry: RetryDead, or
-- hopper_workflow_retry). A parent has to end again (its end writes how
-- on its edges), and each of its children still waiting counts it again
-- (child rows locked first, as above). A step with parents comes back
-- waiting and counts those still live (hopper_workflow_count): it runs
-- once they end, at once when none is left, and applies its policy again
-- if one of them failed. New steps have no edges yet when inserted (they
-- come after): one index probe each.
CREATE OR REPLACE FUNCTION hopper_workflow_returned() RETURNS trigger
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    arrived bigint[];
    arrived_waiting bigint[];
    back bigint[];
    waiting bigint[];
BEGIN
    SELECT array_agg(n.id), array_agg(DISTINCT n.id) FILTER (WHERE n.state = 'waiting')
    INTO arrived, arrived_waiting
    FROM hopper_new_jobs AS n
    WHERE n.meta ? 'hopper.workflow';
    -- Inserts of jobs of no workflow stop here, without reading (or
    -- needing a grant on) the workflow tables: a role that only enqueues
    -- plain jobs needs none.
    IF arrived IS NULL THEN
        RETURN NULL;
    END IF;
    SELECT array_agg(a) INTO back
    FROM unnest(arrived) AS a
    WHERE EXISTS (SELECT FROM hopper_workflow_deps AS d WHERE d.parent_id = a);
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
    IF arrived_waiting IS NOT NULL THEN
        SELECT array_agg(a) INTO waiting
        FROM unnest(arrived_waiting) AS a
        WHERE EXISTS (SELECT FROM hopper_workflow_deps AS d WHERE d.child_id = a);
    END IF;
    IF waiting IS NOT NULL THEN
        PERFORM hopper_workflow_count(waiting);
    END IF;
    RETURN NULL;
END;
$$;

-- hopper_workflow_link(bigint[], bigint[]): the edges are inserted by
-- EXECUTE (see the note, 3).
--
-- Records the edges parents[i] → children[i], whose children are waiting
-- steps (inserted waiting by this transaction, or already waiting), and
-- counts their parents (hopper_workflow_count). Every parent must be a
-- step of its child's workflow in this schema: live (new in this
-- transaction or older), dead, or kept in the history. The parents are
-- checked after hopper_workflow_count has locked them, so that a parent
-- purged or pruned meanwhile is refused rather than taken for a success;
-- a refusal undoes the whole call. Returns the number of steps decided
-- now.
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
        -- planned at each call: see the migration's note (3)
        EXECUTE 'INSERT INTO hopper_workflow_deps (parent_id, child_id)
                 SELECT e.p, e.c FROM unnest($1, $2) AS e(p, c)
                 ON CONFLICT DO NOTHING'
            USING edge_parents, edge_children;
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

-- hopper_workflow_count(bigint[]): the parents' counts are stored by
-- EXECUTE (see the note, 3).
--
-- Counts the parents still to end of the given waiting steps (inserted or
-- brought back by this transaction, or given a new parent), over all
-- their edges stored, and decides at once those with none left. Every
-- parent is locked until the commit, dead ones first, then live ones (FOR
-- KEY SHARE, in id order), so that none ends or comes back unseen: an end
-- that committed first is seen here (its parent is gone: counted as
-- ended), one that waits for this commit then sees these edges. Then the
-- children (FOR NO KEY UPDATE, in id order), whose counts the ends of
-- their other parents write under that lock. The failures on the edges
-- are brought up to date from the parents locked. Returns the number of
-- steps decided now.
CREATE OR REPLACE FUNCTION hopper_workflow_count(children bigint[]) RETURNS integer
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    parents bigint[];
    dead bigint[];
    live bigint[];
    ready bigint[];
    counted_children bigint[];
    counted_left integer[];
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
    -- The counts are read into arrays first, then stored by a statement
    -- planned at each call (see the migration's note, 3).
    SELECT array_agg(c.c ORDER BY c.c) FILTER (WHERE c.parents > 1),
           array_agg(c.parents_left ORDER BY c.c) FILTER (WHERE c.parents > 1),
           array_agg(c.c) FILTER (WHERE c.parents_left = 0)
    INTO counted_children, counted_left, ready
    FROM (SELECT d.child_id AS c, count(*)::integer AS parents,
                 count(*) FILTER (WHERE EXISTS (SELECT FROM hopper_jobs AS p WHERE p.id = d.parent_id))::integer AS parents_left
          FROM hopper_workflow_deps AS d
          JOIN hopper_jobs AS j ON j.id = d.child_id AND j.state = 'waiting'
          WHERE d.child_id = ANY (children)
          GROUP BY d.child_id) AS c;
    IF counted_children IS NOT NULL THEN
        EXECUTE 'INSERT INTO hopper_workflow_waits (child_id, parents_left)
                 SELECT w.c, w.n FROM unnest($1, $2) AS w(c, n)
                 ORDER BY 1
                 ON CONFLICT (child_id) DO UPDATE SET parents_left = excluded.parents_left'
            USING counted_children, counted_left;
    END IF;
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
