-- Workflows: jobs that wait for other jobs. A step is an ordinary job whose
-- metadata names its workflow ("hopper.workflow") and its step
-- ("hopper.step"); "hopper.workflow_policy" says what it does when a parent
-- ends dead or cancelled: 'cancel' (the default: it is cancelled too, and
-- so on down), 'run' (it runs anyway: a batch's callback) or 'wait' (it
-- waits until an operator retries the parent).
--
-- A step with parents is inserted 'waiting', outside the ready index, with
-- a count of its parents still to end (hopper_workflow_waits). A parent's
-- end (its ack, its death, a cancel, a delete: any DELETE from the job
-- table) counts down its children in the same transaction, and the child
-- whose count reaches zero is promoted (or cancelled, or left waiting) by
-- that very transaction. Nothing polls, nothing is elected, and a crash
-- rolls the count back with the end that made it.
--
-- A parent succeeded when it left the job table other than through
-- hopper_dead_jobs (acked, or deleted by an operator); it failed when it
-- is in hopper_dead_jobs (dead or cancelled). A parent retried from the
-- dead table comes back as a parent still to end: its waiting children
-- count it again.
--
-- Guarded by: schema/TestWorkflowsMigration, schema/TestTriggerRules (the
-- workflows' rules), TestWorkflowProperty, workflows_test.go,
-- tests/chaos/TestWorkflowChaos, schema/TestPLpgSQLCheck.

-- Only a job of a sequence or a workflow waits.
ALTER TABLE hopper_jobs DROP CONSTRAINT hopper_jobs_sequence_check;
ALTER TABLE hopper_jobs
    ADD CONSTRAINT hopper_jobs_sequence_check CHECK (
        (meta IS NULL OR NOT meta ? 'hopper.sequence'
         OR (jsonb_typeof(meta -> 'hopper.sequence') = 'string'
             AND octet_length(meta ->> 'hopper.sequence') BETWEEN 1 AND 255))
        AND (meta IS NULL OR NOT meta ? 'hopper.sequence_policy'
             OR meta ->> 'hopper.sequence_policy' IN ('block', 'continue'))
        AND (state <> 'waiting' OR coalesce(meta ? 'hopper.sequence' OR meta ? 'hopper.workflow', false))
    ) NOT VALID;
ALTER TABLE hopper_jobs VALIDATE CONSTRAINT hopper_jobs_sequence_check;

-- A workflow id and a step name are strings of 1 to 255 bytes; a policy is
-- cancel, run or wait; a step is in no sequence (the two orders would
-- fight over the job's turn); a step name or policy needs a workflow.
ALTER TABLE hopper_jobs
    ADD CONSTRAINT hopper_jobs_workflow_check CHECK (
        meta IS NULL
        OR (NOT meta ? 'hopper.workflow'
            AND NOT meta ? 'hopper.step' AND NOT meta ? 'hopper.workflow_policy')
        -- (coalesce: a missing key makes the test NULL, which a CHECK
        -- would let pass)
        OR coalesce(jsonb_typeof(meta -> 'hopper.workflow') = 'string'
                    AND octet_length(meta ->> 'hopper.workflow') BETWEEN 1 AND 255
                    AND jsonb_typeof(meta -> 'hopper.step') = 'string'
                    AND octet_length(meta ->> 'hopper.step') BETWEEN 1 AND 255
                    AND coalesce(meta ->> 'hopper.workflow_policy', 'cancel') IN ('cancel', 'run', 'wait')
                    AND NOT meta ? 'hopper.sequence', false)
    ) NOT VALID;
ALTER TABLE hopper_jobs VALIDATE CONSTRAINT hopper_jobs_workflow_check;

-- A workflow's steps, wherever they are: live, dead, or kept in the
-- history (a workflow's completed steps always are, for their results).
CREATE INDEX hopper_jobs_workflow_idx ON hopper_jobs ((meta ->> 'hopper.workflow'), id)
    WHERE meta ? 'hopper.workflow';
CREATE INDEX hopper_dead_jobs_workflow_idx ON hopper_dead_jobs ((meta ->> 'hopper.workflow'), id)
    WHERE meta ? 'hopper.workflow';
CREATE INDEX hopper_job_history_workflow_idx ON hopper_job_history ((meta ->> 'hopper.workflow'), id)
    WHERE meta ? 'hopper.workflow';

-- The edges: child_id runs after parent_id. Looked up by parent (the
-- primary key: a parent's end finds its children) and by child (a step's
-- parents: its results, its retry).
CREATE TABLE hopper_workflow_deps (
    parent_id bigint NOT NULL,
    child_id  bigint NOT NULL,
    PRIMARY KEY (parent_id, child_id),
    CONSTRAINT hopper_workflow_deps_check CHECK (parent_id <> child_id)
);
CREATE INDEX hopper_workflow_deps_child_idx ON hopper_workflow_deps (child_id, parent_id);

-- How many parents of a waiting step with several parents have still to
-- end (a step of one parent needs no count: that parent's end is its
-- turn). Written only with the step's own row locked (FOR NO KEY UPDATE,
-- or inserted by the same transaction), so its updates are serialized by
-- that lock and every parent's end counts exactly once.
CREATE TABLE hopper_workflow_waits (
    child_id     bigint  PRIMARY KEY,
    parents_left integer NOT NULL
);

-- Promotes, cancels or leaves the given waiting steps, whose parents have
-- all ended (the caller holds their rows' locks): a step none of whose
-- parents failed, or whose policy is run, becomes pending (scheduled when
-- its run_at is later; its run_at moves up to now, as a sequence's turn
-- does); a step with a failed parent under cancel moves to the dead table
-- as cancelled (its own children are the caller's to count down: returns
-- their ids); under wait it stays. Wakes each queue once.
CREATE FUNCTION hopper_workflow_decide(ready bigint[]) RETURNS bigint[]
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
    SELECT array_agg(v.id) FILTER (WHERE NOT v.failed OR v.policy = 'run'),
           array_agg(v.id) FILTER (WHERE v.failed AND v.policy = 'cancel'),
           array_agg(v.id) FILTER (WHERE v.failed AND v.policy = 'wait')
    INTO go, doomed, held
    FROM (SELECT j.id, coalesce(j.meta ->> 'hopper.workflow_policy', 'cancel') AS policy,
                 EXISTS (SELECT FROM hopper_workflow_deps AS d
                         JOIN hopper_dead_jobs AS x ON x.id = d.parent_id
                         WHERE d.child_id = j.id) AS failed
          FROM hopper_jobs AS j
          WHERE j.id = ANY (ready) AND j.state = 'waiting'
          OFFSET 0) AS v; -- OFFSET 0: each EXISTS runs once, not once per FILTER

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
                   r.unique_key, r.errors, 'parent ' || f.id || ' ended ' || f.state,
                   r.created_at, r.run_at, 'cancelled', r.meta, r.concurrency_key
            FROM removed AS r
            CROSS JOIN LATERAL (SELECT x.id, x.state
                                FROM hopper_workflow_deps AS d
                                JOIN hopper_dead_jobs AS x ON x.id = d.parent_id
                                WHERE d.child_id = r.id
                                ORDER BY x.id
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
-- for job rows locks them), and only then counted down: two parents of
-- one child ending in two transactions at once are serialized by the
-- child's lock, and the second sees the first's count.
CREATE FUNCTION hopper_workflow_pass(ended bigint[]) RETURNS bigint[]
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

-- When steps leave the job table (one call per deleting statement, over
-- the rows it deleted): their children are counted down, and the children
-- cancelled on the way (policy cancel) have theirs counted down in turn,
-- in a loop rather than by this trigger firing again for each level (a
-- chain of ten thousand steps would exhaust the stack). The setting marks
-- the loop, so the deletes it makes itself are left to it. Deletes of jobs
-- of no workflow return at the first statement.
CREATE FUNCTION hopper_workflow_advance() RETURNS trigger
LANGUAGE plpgsql VOLATILE AS $$
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

CREATE TRIGGER hopper_jobs_workflow_advance
    AFTER DELETE ON hopper_jobs
    REFERENCING OLD TABLE AS hopper_old_jobs
    FOR EACH STATEMENT
    EXECUTE FUNCTION hopper_workflow_advance();

-- Steps that come back from the dead table (a retry: RetryDead, or
-- hopper_workflow_retry). A parent has to end again: each of its children
-- still waiting counts it again (child rows locked first, as above). A
-- step with parents comes back waiting and counts those still live
-- (hopper_workflow_count): it runs once they end, at once when none is
-- left, and applies its policy again if one of them failed. New steps
-- have no edges yet when inserted (they come after): one index probe
-- each.
CREATE FUNCTION hopper_workflow_returned() RETURNS trigger
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    back bigint[];
    edge_parents bigint[];
    edge_children bigint[];
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
    SELECT array_agg(d.parent_id ORDER BY d.child_id, d.parent_id), array_agg(d.child_id ORDER BY d.child_id, d.parent_id)
    INTO edge_parents, edge_children
    FROM hopper_new_jobs AS n
    JOIN hopper_workflow_deps AS d ON d.child_id = n.id
    WHERE n.meta ? 'hopper.workflow' AND n.state = 'waiting';
    IF edge_children IS NOT NULL THEN
        PERFORM hopper_workflow_count(edge_parents, edge_children, 9223372036854775807);
    END IF;
    RETURN NULL;
END;
$$;

CREATE TRIGGER hopper_jobs_workflow_returned
    AFTER INSERT ON hopper_jobs
    REFERENCING NEW TABLE AS hopper_new_jobs
    FOR EACH STATEMENT
    EXECUTE FUNCTION hopper_workflow_returned();

-- Counts the parents still to end of waiting steps this transaction
-- inserted (or brought back), over their edges parents[i] → children[i],
-- and decides at once those with none left. Parents with ids from
-- first_new on were inserted by the same transaction: live, nothing to
-- lock. Older ones are locked FOR KEY SHARE until the commit, so that
-- none ends unseen: an end that committed first is seen here (its parent
-- is gone: counted as ended), one that waits for this commit then sees
-- these edges. Returns the number of steps decided now.
CREATE FUNCTION hopper_workflow_count(parents bigint[], children bigint[], first_new bigint) RETURNS integer
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    live bigint[];
    ready bigint[];
BEGIN
    -- Dead parents first: a retry that is bringing one back (its row
    -- locked) is waited for, and the live parents, read next with a fresh
    -- snapshot, then include it; a retry that comes after waits for this
    -- commit, and its trigger then counts it for these children.
    PERFORM count(*)
    FROM (SELECT x.id FROM hopper_dead_jobs AS x
          WHERE x.id IN (SELECT p FROM unnest(parents) AS p WHERE p < first_new)
          ORDER BY x.id
          FOR KEY SHARE OF x) AS l;
    SELECT coalesce(array_agg(l.id), '{}') INTO live
    FROM (SELECT j.id FROM hopper_jobs AS j
          WHERE j.id IN (SELECT p FROM unnest(parents) AS p WHERE p < first_new)
          ORDER BY j.id
          FOR KEY SHARE OF j) AS l;
    -- A step of one parent has no count row: its parent's end is its
    -- turn (hopper_workflow_pass).
    WITH counted AS (
        SELECT e.c, count(*)::integer AS parents,
               count(*) FILTER (WHERE e.p >= first_new OR e.p = ANY (live))::integer AS parents_left
        FROM (SELECT DISTINCT p, c FROM unnest(parents, children) AS u(p, c)) AS e
        GROUP BY e.c
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

-- Records the edges parents[i] → children[i] of steps this transaction
-- inserted waiting, and counts their parents (hopper_workflow_count). An
-- older parent (a step added to a running workflow names steps already
-- there) must be a step of its child's workflow: live, dead, or kept in
-- the history. Returns the number of steps decided now.
CREATE FUNCTION hopper_workflow_link(parents bigint[], children bigint[], first_new bigint) RETURNS integer
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    stranger record;
BEGIN
    IF cardinality(parents) <> cardinality(children) THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = 'hopper: workflow edges: ' || cardinality(parents) || ' parents for ' || cardinality(children) || ' children';
    END IF;
    SELECT e.p, e.c INTO stranger
    FROM unnest(parents, children) AS e(p, c)
    LEFT JOIN hopper_jobs AS c ON c.id = e.c
    WHERE e.p = e.c
       OR c.id IS NULL OR c.state <> 'waiting' OR NOT c.meta ? 'hopper.workflow'
       OR (e.p < first_new
           AND NOT EXISTS (SELECT FROM hopper_jobs AS j
                           WHERE j.id = e.p AND j.meta ? 'hopper.workflow'
                             AND (j.meta ->> 'hopper.workflow') = (c.meta ->> 'hopper.workflow'))
           AND NOT EXISTS (SELECT FROM hopper_dead_jobs AS x
                           WHERE x.id = e.p AND x.meta ? 'hopper.workflow'
                             AND (x.meta ->> 'hopper.workflow') = (c.meta ->> 'hopper.workflow'))
           AND NOT EXISTS (SELECT FROM hopper_job_history AS h
                           WHERE h.id = e.p AND h.meta ? 'hopper.workflow'
                             AND (h.meta ->> 'hopper.workflow') = (c.meta ->> 'hopper.workflow')))
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = 'hopper: unknown step: job ' || stranger.p || ' is no step of the workflow of job ' || stranger.c,
            HINT = 'a step''s parents are steps of its own workflow, in this schema, and the step waits for them';
    END IF;
    INSERT INTO hopper_workflow_deps (parent_id, child_id)
    SELECT DISTINCT e.p, e.c FROM unnest(parents, children) AS e(p, c)
    ORDER BY 1, 2
    ON CONFLICT DO NOTHING;
    RETURN hopper_workflow_count(parents, children, first_new);
END;
$$;

-- Retries a workflow whole: every dead or cancelled step comes back, under
-- its own id and with as many attempts again as it had (as RetryDead
-- does): ready when it has no parents, else waiting, for the trigger on
-- insert to count its parents still live (the ones coming back included)
-- and decide it at once when none is left. Returns the ids that came
-- back.
CREATE FUNCTION hopper_workflow_retry(workflow text) RETURNS SETOF bigint
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_variable
BEGIN
    RETURN QUERY
    WITH picked AS (
        SELECT d.id
        FROM hopper_dead_jobs AS d
        WHERE d.meta ? 'hopper.workflow' AND (d.meta ->> 'hopper.workflow') = workflow
        ORDER BY d.id
        -- A step another retry is bringing back is that retry's: waiting
        -- for it could deadlock (that retry's trigger locks the step's
        -- parents, which this one may hold).
        FOR UPDATE SKIP LOCKED
    ), revived AS (
        INSERT INTO hopper_jobs (id, queue, kind, version, payload, priority, attempt,
                                 max_attempts, unique_key, errors, created_at, meta, concurrency_key, state, run_at)
        OVERRIDING SYSTEM VALUE
        SELECT d.id, d.queue, d.kind, d.version, d.payload, d.priority, d.attempt,
               d.attempt + d.max_attempts, d.unique_key, d.errors, d.created_at, d.meta, d.concurrency_key,
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
    EXECUTE format('ALTER FUNCTION %1$I.hopper_workflow_decide(bigint[]) SET search_path = %1$I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION %1$I.hopper_workflow_pass(bigint[]) SET search_path = %1$I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION %1$I.hopper_workflow_advance() SET search_path = %1$I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION %1$I.hopper_workflow_returned() SET search_path = %1$I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION %1$I.hopper_workflow_count(bigint[], bigint[], bigint) SET search_path = %1$I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION %1$I.hopper_workflow_link(bigint[], bigint[], bigint) SET search_path = %1$I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION %1$I.hopper_workflow_retry(text) SET search_path = %1$I, pg_temp', current_schema());
END;
$$;
