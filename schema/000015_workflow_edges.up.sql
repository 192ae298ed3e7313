-- Workflow edges that outlive their parents, counts taken from the edges
-- stored, and the isolation level the triggers need.
--
-- 1. A parent's failure is written on its edges (parent_failed) when it
--    ends in hopper_dead_jobs, and cleared when it ends again, completed. The verdict
--    on a child, a batch's counts and a step's view of its parents read
--    the edge, so purging a dead parent (PurgeDead, the workers' dead-job
--    retention) no longer turns its failure into a success. A step held
--    under the wait policy by a parent that is purged is cancelled: no
--    retry of that parent can come any more.
-- 2. hopper_workflow_link checks every parent, whatever its id, and locks
--    every parent until the commit: an id that is no step of the child's
--    workflow (another schema's, a purged one, one never issued) is
--    refused. first_new is no longer needed (the three-argument form
--    stays for callers that pass it).
-- 3. A child's count of parents still to end is taken from all its edges
--    stored, under the child's row lock: edges recorded by several calls,
--    or a parent added to a step that already waits, count exactly.
-- 4. The triggers that pass a turn read what other transactions committed
--    since the statement began; under REPEATABLE READ or SERIALIZABLE
--    their snapshot is the transaction's, and they would strand work.
--    Writing a job of a sequence or a workflow (insert, delete, purge, a
--    link, a skip) under those levels is refused with SQLSTATE 0A000.
--
-- Guarded by: schema/TestWorkflowEdgesMigration, schema/TestTriggerRules,
-- workflow_edges_test.go (one test per defect), TestWorkflowProperty,
-- TestSequenceProperty, schema/TestPLpgSQLCheck.

-- Refuses the call unless the transaction is READ COMMITTED; what names
-- the operation for the message.
CREATE FUNCTION hopper_require_read_committed(what text) RETURNS void
LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION USING ERRCODE = '0A000',
            MESSAGE = 'hopper: read committed required: ' || what || ' in a '
                      || upper(current_setting('transaction_isolation')) || ' transaction',
            HINT = 'sequences and workflows pass turns with what other transactions committed since each statement began; '
                   || 'run this in a READ COMMITTED transaction';
    END IF;
END;
$$;

-- A statement that inserts or deletes jobs of a sequence or a workflow
-- under another level is refused (its rows are hopper_isolation_rows,
-- new or old). Under READ COMMITTED this is one setting read.
CREATE FUNCTION hopper_isolation_check() RETURNS trigger
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF current_setting('transaction_isolation') = 'read committed' THEN
        RETURN NULL;
    END IF;
    IF EXISTS (SELECT FROM hopper_isolation_rows AS r
               WHERE r.meta ? 'hopper.sequence' OR r.meta ? 'hopper.workflow') THEN
        PERFORM hopper_require_read_committed(lower(TG_OP) || ' of a job of a sequence or a workflow');
    END IF;
    RETURN NULL;
END;
$$;

CREATE TRIGGER hopper_jobs_isolation_insert
    AFTER INSERT ON hopper_jobs
    REFERENCING NEW TABLE AS hopper_isolation_rows
    FOR EACH STATEMENT
    EXECUTE FUNCTION hopper_isolation_check();

CREATE TRIGGER hopper_jobs_isolation_delete
    AFTER DELETE ON hopper_jobs
    REFERENCING OLD TABLE AS hopper_isolation_rows
    FOR EACH STATEMENT
    EXECUTE FUNCTION hopper_isolation_check();

CREATE TRIGGER hopper_dead_jobs_isolation_delete
    AFTER DELETE ON hopper_dead_jobs
    REFERENCING OLD TABLE AS hopper_isolation_rows
    FOR EACH STATEMENT
    EXECUTE FUNCTION hopper_isolation_check();

-- An operator's skip reads the key's waiting jobs: READ COMMITTED only.
CREATE OR REPLACE FUNCTION hopper_sequence_skip(sequence_key text, OUT skipped boolean, OUT promoted bigint)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_variable
BEGIN
    PERFORM hopper_require_read_committed('skipping a sequence''s head');
    PERFORM pg_advisory_xact_lock(hopper_sequence_lock_id(sequence_key));
    DELETE FROM hopper_sequence_blocks AS b WHERE b.sequence_key = sequence_key;
    skipped := FOUND;
    IF skipped THEN
        promoted := hopper_sequence_promote(sequence_key);
    END IF;
END;
$$;

-- How the edge's parent ended, when it failed: 'dead' or 'cancelled'
-- (NULL: completed). Written by each end of the parent (a retried parent
-- ends again); read only once the parent has ended, so a live parent's
-- old failure means nothing; it stays when the dead row is purged.
ALTER TABLE hopper_workflow_deps ADD COLUMN parent_failed text
    CONSTRAINT hopper_workflow_deps_failed_check CHECK (parent_failed IN ('dead', 'cancelled'));
UPDATE hopper_workflow_deps AS d SET parent_failed = x.state
FROM hopper_dead_jobs AS x
WHERE x.id = d.parent_id;
-- The edges of failed parents, few: what an end that completes after a
-- failure clears, found without reading the others.
CREATE INDEX hopper_workflow_deps_failed_idx ON hopper_workflow_deps (parent_id) WHERE parent_failed IS NOT NULL;

-- Promotes, cancels or leaves the given waiting steps, whose parents have
-- all ended (the caller holds their rows' locks): a step none of whose
-- parents failed, or whose policy is run, becomes pending (scheduled when
-- its run_at is later; its run_at moves up to now, as a sequence's turn
-- does); a step with a failed parent under cancel moves to the dead table
-- as cancelled (its own children are the caller's to count down: returns
-- their ids); under wait it stays, unless a failed parent is gone for good
-- (purged: no retry can bring it back), and then it is cancelled too.
-- The failures are read from the edges, never from the dead rows. Wakes
-- each queue once.
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

-- Counts down the children of the given ended steps and decides those
-- whose count reaches zero (hopper_workflow_decide); returns the children
-- it cancelled, whose own children the caller counts down next. The
-- children are locked first, in id order (as every statement that waits
-- for job rows locks them), then the ended steps write how they ended on
-- their edges, and only then are the children counted down: two parents
-- of one child ending in two transactions at once are serialized by the
-- child's lock, and the second sees the first's count.
CREATE OR REPLACE FUNCTION hopper_workflow_pass(ended bigint[]) RETURNS bigint[]
LANGUAGE plpgsql VOLATILE AS $$
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
CREATE FUNCTION hopper_workflow_count(children bigint[]) RETURNS integer
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

-- Records the edges parents[i] → children[i], whose children are waiting
-- steps (inserted waiting by this transaction, or already waiting), and
-- counts their parents (hopper_workflow_count). Every parent must be a
-- step of its child's workflow in this schema: live (new in this
-- transaction or older), dead, or kept in the history. The parents are
-- checked after hopper_workflow_count has locked them, so that a parent
-- purged or pruned meanwhile is refused rather than taken for a success;
-- a refusal undoes the whole call. Returns the number of steps decided
-- now.
CREATE FUNCTION hopper_workflow_link(parents bigint[], children bigint[]) RETURNS integer
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

-- The form of migration 14: first_new is ignored (every parent is checked
-- and locked now).
CREATE OR REPLACE FUNCTION hopper_workflow_link(parents bigint[], children bigint[], first_new bigint) RETURNS integer
LANGUAGE sql VOLATILE AS $$
    SELECT hopper_workflow_link(parents, children)
$$;

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

DROP FUNCTION hopper_workflow_count(bigint[], bigint[], bigint);

-- When dead steps are purged (PurgeDead, the workers' dead-job retention,
-- or a DELETE of your own): a child held under the wait policy by one of
-- them can never see it retried, so it is decided again, and
-- hopper_workflow_decide cancels it (its reason says the parent was
-- purged). Children still waiting for live parents keep the failure on
-- their edge and meet it when their count reaches zero.
CREATE FUNCTION hopper_workflow_purged() RETURNS trigger
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    purged bigint[];
    held bigint[];
BEGIN
    SELECT array_agg(o.id) INTO purged
    FROM hopper_purged_jobs AS o
    WHERE o.meta ? 'hopper.workflow';
    IF purged IS NULL THEN
        RETURN NULL;
    END IF;
    SELECT array_agg(l.id) INTO held
    FROM (SELECT j.id FROM hopper_jobs AS j
          WHERE j.id IN (SELECT d.child_id FROM hopper_workflow_deps AS d WHERE d.parent_id = ANY (purged))
            AND j.state = 'waiting'
          ORDER BY j.id
          FOR NO KEY UPDATE OF j) AS l;
    IF held IS NULL THEN
        RETURN NULL;
    END IF;
    SELECT array_agg(h) INTO held
    FROM unnest(held) AS h
    WHERE NOT EXISTS (SELECT FROM hopper_workflow_deps AS d
                      JOIN hopper_jobs AS p ON p.id = d.parent_id
                      WHERE d.child_id = h);
    PERFORM hopper_workflow_decide(held);
    RETURN NULL;
END;
$$;

CREATE TRIGGER hopper_dead_jobs_workflow_purged
    AFTER DELETE ON hopper_dead_jobs
    REFERENCING OLD TABLE AS hopper_purged_jobs
    FOR EACH STATEMENT
    EXECUTE FUNCTION hopper_workflow_purged();

-- Revivals of one workflow's dead steps take turns. A revival locks the
-- dead rows it picks, then its trigger locks the revived steps' dead
-- parents (hopper_workflow_count): two revivals of one workflow at once
-- (RetryWorkflow and RetryDeadJobs, say) could each hold a row the other's
-- trigger waits for, and PostgreSQL would abort one as deadlocked. Each
-- takes its workflows' advisory locks first, in name order, before it
-- picks a row (RetryDead in queries/control.sql, hopper_workflow_retry).
CREATE FUNCTION hopper_workflow_lock_id(workflow text) RETURNS bigint
LANGUAGE sql STABLE AS $$
    SELECT hashtextextended('hopper_jobs'::regclass::oid::text || ':workflow:' || workflow, 0)
$$;

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

-- The triggers' statements touch a few rows each, but a planner without
-- statistics of the edges (a new or unanalyzed table) can cost them high
-- enough to compile them (JIT): a third of a second per acknowledgement
-- batch was measured, for no gain. They run without it.
ALTER FUNCTION hopper_workflow_advance() SET jit = off;
ALTER FUNCTION hopper_workflow_pass(bigint[]) SET jit = off;
ALTER FUNCTION hopper_workflow_decide(bigint[]) SET jit = off;
ALTER FUNCTION hopper_workflow_returned() SET jit = off;
ALTER FUNCTION hopper_workflow_count(bigint[]) SET jit = off;
ALTER FUNCTION hopper_workflow_link(bigint[], bigint[]) SET jit = off;
ALTER FUNCTION hopper_workflow_purged() SET jit = off;

DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION %1$I.hopper_require_read_committed(text) SET search_path = %1$I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION %1$I.hopper_isolation_check() SET search_path = %1$I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION %1$I.hopper_workflow_count(bigint[]) SET search_path = %1$I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION %1$I.hopper_workflow_link(bigint[], bigint[]) SET search_path = %1$I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION %1$I.hopper_workflow_link(bigint[], bigint[], bigint) SET search_path = %1$I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION %1$I.hopper_workflow_purged() SET search_path = %1$I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION %1$I.hopper_workflow_lock_id(text) SET search_path = %1$I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION %1$I.hopper_workflow_retry(text) SET search_path = %1$I, pg_temp', current_schema());
END;
$$;
