-- Sequences: jobs that share a sequence key run one at a time, in order,
-- across every worker. The key lives in the job's metadata
-- ("hopper.sequence"), so every path that writes a job (enqueue, COPY, the
-- SQL API, a retry from the dead table, the history) carries it without a
-- column of its own; "hopper.sequence_policy" says what a dead or cancelled
-- job does to the rest: 'block' (the default) or 'continue'.
--
-- A sequence has at most one head: its job that is pending, scheduled or
-- running. The rest wait in the state 'waiting', outside the ready index,
-- so a claim never sees them. The head's end promotes the next job, by id,
-- in the transaction that ends it (its ack, its death, a cancel, a
-- delete), and a new job placed behind a head is placed when its
-- transaction commits. Nothing polls, nothing is elected, nothing is left
-- waiting with no head to wake it.
--
-- Guarded by: schema/TestSequencesMigration, schema/TestTriggerRules (the
-- sequences' rules), TestSequenceProperty, jobs/sequence_test.go,
-- tests/chaos/TestSequenceChaos, schema/TestPLpgSQLCheck.

ALTER TABLE hopper_jobs DROP CONSTRAINT hopper_jobs_state_check;
ALTER TABLE hopper_jobs
    ADD CONSTRAINT hopper_jobs_state_check CHECK (state IN ('pending', 'scheduled', 'running', 'waiting')) NOT VALID;
ALTER TABLE hopper_jobs VALIDATE CONSTRAINT hopper_jobs_state_check;

-- Jobs that carry a sequence key already (written by SQL of your own, or
-- left ready by this migration's down): the first of each key, a running
-- one first, is its head; the others wait behind it, in id order.
UPDATE hopper_jobs AS j
SET state = 'waiting'
FROM (SELECT r.id, row_number() OVER (PARTITION BY r.meta ->> 'hopper.sequence'
                                      ORDER BY (r.state = 'running') DESC, r.id) AS place
      FROM hopper_jobs AS r
      WHERE r.meta ? 'hopper.sequence' AND jsonb_typeof(r.meta -> 'hopper.sequence') = 'string') AS keyed
WHERE j.id = keyed.id AND keyed.place > 1 AND j.state IN ('pending', 'scheduled');

-- A sequence key is a string of 1 to 255 bytes; a policy is block or
-- continue; only a job of a sequence waits.
ALTER TABLE hopper_jobs
    ADD CONSTRAINT hopper_jobs_sequence_check CHECK (
        (meta IS NULL OR NOT meta ? 'hopper.sequence'
         OR (jsonb_typeof(meta -> 'hopper.sequence') = 'string'
             AND octet_length(meta ->> 'hopper.sequence') BETWEEN 1 AND 255))
        AND (meta IS NULL OR NOT meta ? 'hopper.sequence_policy'
             OR meta ->> 'hopper.sequence_policy' IN ('block', 'continue'))
        AND (state <> 'waiting' OR coalesce(meta ? 'hopper.sequence', false))
    ) NOT VALID;
ALTER TABLE hopper_jobs VALIDATE CONSTRAINT hopper_jobs_sequence_check;

-- The waiting jobs of each key, in the order they run.
CREATE INDEX hopper_jobs_sequence_waiting_idx ON hopper_jobs ((meta ->> 'hopper.sequence'), id)
    WHERE state = 'waiting';

-- At most one head per key. The triggers below never make a second; this
-- index makes sure of it: a raw INSERT of a ready job into a sequence that
-- has a head fails here instead of running out of turn.
CREATE UNIQUE INDEX hopper_jobs_sequence_head_idx ON hopper_jobs ((meta ->> 'hopper.sequence'))
    WHERE state <> 'waiting' AND meta ? 'hopper.sequence';

-- Sequences held by a head that ended dead or cancelled under the block
-- policy. The row stays until an operator retries the head (it comes back
-- as the head) or skips it (the next job runs). The waiting jobs stay
-- where they are meanwhile.
CREATE TABLE hopper_sequence_blocks (
    sequence_key text COLLATE "C" PRIMARY KEY,
    job_id       bigint      NOT NULL,
    queue        text        NOT NULL,
    kind         text        NOT NULL,
    state        text        NOT NULL, -- dead or cancelled
    reason       text        NOT NULL,
    blocked_at   timestamptz NOT NULL DEFAULT now()
);

-- The advisory lock of a sequence key: a 64-bit hash of the schema's job
-- table (one per schema: advisory locks are per database) and the key.
-- Enqueues take it before their insert, so that within a key ids follow
-- commit order; placement takes it again (re-entrant) at commit.
CREATE FUNCTION hopper_sequence_lock_id(sequence_key text) RETURNS bigint
LANGUAGE sql STABLE AS $$
    SELECT hashtextextended('hopper_jobs'::regclass::oid::text || ':sequence:' || sequence_key, 0)
$$;

-- Makes the first waiting job of the key its head (pending, or scheduled
-- when it is due later) and wakes its queue. A job whose turn comes is due
-- from then: its run_at moves up to now when it was earlier, so it queues
-- behind the jobs already ready (keys take turns, and a busy key's next
-- job does not jump the backlog), and it lands ahead of its workers' claim
-- cursors rather than making them scan again from behind. Returns its id, or NULL when
-- none waits. Each statement of a PL/pgSQL function takes a fresh snapshot
-- (READ COMMITTED), so a waiting job deleted or cancelled while this ran
-- is passed over on the next round.
CREATE FUNCTION hopper_sequence_promote(sequence_key text) RETURNS bigint
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

-- hopper_sequence_promote for many keys at once, none of which has a head
-- or a block: one statement for all (an acknowledgement batch's keys, a
-- commit's), then hopper_sequence_promote for any key whose first waiting
-- job changed under it. The promoted jobs are updated in id order (a loop
-- over them sorted, each looked up by primary key), so they are locked in
-- the order every statement that waits for job rows locks them, without a
-- separate lock of each (a write of its own); their queues are woken once
-- each, with the place in claim order of their first promoted job
-- (as Notify does).
CREATE FUNCTION hopper_sequence_promote_keys(keys text[]) RETURNS void
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

-- Each inserting statement notes, for each sequence key of its new jobs,
-- the smallest new id, in a transaction-local setting (one per schema:
-- the name carries the job table's oid), for the placement at commit
-- below.
CREATE FUNCTION hopper_sequence_collect() RETURNS trigger
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    setting constant text := 'hopper.sequence_keys_' || TG_RELID::text;
    firsts jsonb;
BEGIN
    IF NOT EXISTS (SELECT FROM hopper_new_jobs AS n WHERE n.meta ? 'hopper.sequence') THEN
        RETURN NULL;
    END IF;
    SELECT jsonb_object_agg(f.key, f.first) INTO firsts
    FROM (SELECT a.key, min(a.id) AS first
          FROM (SELECT n.meta ->> 'hopper.sequence' AS key, n.id
                FROM hopper_new_jobs AS n
                WHERE n.meta ? 'hopper.sequence'
                UNION ALL
                SELECT e.key, e.value::bigint
                FROM jsonb_each_text(coalesce(nullif(current_setting(setting, true), ''), '{}')::jsonb) AS e) AS a
          GROUP BY a.key) AS f;
    PERFORM set_config(setting, firsts::text, true);
    RETURN NULL;
END;
$$;

CREATE TRIGGER hopper_jobs_sequence_collect
    AFTER INSERT ON hopper_jobs
    REFERENCING NEW TABLE AS hopper_new_jobs
    FOR EACH STATEMENT
    EXECUTE FUNCTION hopper_sequence_collect();

-- The job whose end makes first (a new job of the key, not committed yet)
-- the first waiting job: the last waiting job before it, or, when none
-- waits before it, the head. NULL when the key has neither. Without a
-- search_path of its own, unlike the other functions, so that PostgreSQL
-- inlines it into the statements of hopper_sequence_place (which has one).
CREATE FUNCTION hopper_sequence_before(sequence_key text, first bigint) RETURNS bigint
LANGUAGE sql STABLE AS $$
    SELECT coalesce(
        (SELECT w.id FROM hopper_jobs AS w
         WHERE (w.meta ->> 'hopper.sequence') = sequence_key AND w.state = 'waiting' AND w.id < first
         ORDER BY w.id DESC
         LIMIT 1),
        (SELECT h.id FROM hopper_jobs AS h
         WHERE (h.meta ->> 'hopper.sequence') = sequence_key AND h.state <> 'waiting' AND h.meta ? 'hopper.sequence'))
$$;

-- At commit (a deferred constraint trigger, fired for each new job of a
-- sequence; the first firing does the work for every key the transaction
-- wrote to, the others find nothing left), with the keys' locks held (in
-- one hash order), for each key: the job whose end will make the first
-- new job the first waiting one (hopper_sequence_before) is locked FOR KEY
-- SHARE until the commit, in id order as every statement that waits for
-- job rows locks them, so that it cannot end before the new jobs are
-- visible: its deleter's trigger then promotes them in their turn. With a
-- backlog that job is a waiting one, and the head's acknowledgement never
-- waits for an enqueue; with none it is the head, whose acknowledgement
-- waits for this commit, a moment. A job that ended before it was locked
-- (meanwhile, or while this waited for its lock) is not locked; the round
-- runs again, and its fresh snapshot sees what that end did (a promotion,
-- a block), and which job is now before. A key with no head and no block
-- gets one: its first waiting job.
-- A dead head that came back (a retry) lifts its block.
CREATE FUNCTION hopper_sequence_place() RETURNS trigger
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    setting constant text := 'hopper.sequence_keys_' || TG_RELID::text;
    keys text[];
    firsts bigint[];
    before bigint[];
    locked bigint;
BEGIN
    SELECT array_agg(e.key ORDER BY e.key), array_agg(e.value::bigint ORDER BY e.key) INTO keys, firsts
    FROM jsonb_each_text(coalesce(nullif(current_setting(setting, true), ''), '{}')::jsonb) AS e;
    IF keys IS NULL THEN
        RETURN NULL;
    END IF;
    PERFORM set_config(setting, '', true);
    PERFORM count(pg_advisory_xact_lock(l.id))
    FROM (SELECT DISTINCT hopper_sequence_lock_id(k) AS id FROM unnest(keys) AS k ORDER BY 1) AS l;
    DELETE FROM hopper_sequence_blocks AS b
    WHERE b.sequence_key = ANY (keys) AND EXISTS (SELECT FROM hopper_jobs AS j WHERE j.id = b.job_id);
    FOR round IN 1..100 LOOP
        SELECT coalesce(array_agg(b.id), '{}') INTO before
        FROM (SELECT hopper_sequence_before(k.key, k.first) AS id FROM unnest(keys, firsts) AS k(key, first)) AS b
        WHERE b.id IS NOT NULL;
        SELECT count(*) INTO locked
        FROM (SELECT j.id FROM hopper_jobs AS j
              WHERE j.id = ANY (before)
              ORDER BY j.id
              FOR KEY SHARE OF j) AS l;
        -- A job gone since the statement before (ended meanwhile, or while
        -- this waited for its lock) is not locked: look again.
        EXIT WHEN locked = cardinality(before);
        IF round = 100 THEN
            RAISE EXCEPTION 'hopper: sequences: the jobs ahead of % kept changing while this commit locked them', keys;
        END IF;
    END LOOP;
    SELECT array_agg(k) INTO keys
    FROM unnest(keys) AS k
    WHERE NOT EXISTS (SELECT FROM hopper_jobs AS j
                      WHERE (j.meta ->> 'hopper.sequence') = k AND j.state <> 'waiting' AND j.meta ? 'hopper.sequence')
      AND NOT EXISTS (SELECT FROM hopper_sequence_blocks AS b WHERE b.sequence_key = k);
    IF keys IS NOT NULL THEN
        PERFORM hopper_sequence_promote_keys(keys);
    END IF;
    RETURN NULL;
END;
$$;

CREATE CONSTRAINT TRIGGER hopper_jobs_sequence_place
    AFTER INSERT ON hopper_jobs
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW
    WHEN (NEW.meta ? 'hopper.sequence')
    EXECUTE FUNCTION hopper_sequence_place();

-- When heads leave the job table (one call per deleting statement, over
-- the rows it deleted: an acknowledgement batch of a thousand heads is a
-- handful of set-based statements, not a thousand calls): a head that
-- completed (acked, deleted) passes the turn to the next job of its key;
-- one that ended dead or cancelled (the statement that deleted it wrote it
-- to hopper_dead_jobs, which this trigger, fired at the statement's end,
-- sees) blocks its key under the block policy, or passes the turn under
-- continue. Deletes without a head of a sequence return at the first
-- statement.
CREATE FUNCTION hopper_sequence_advance() RETURNS trigger
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

CREATE TRIGGER hopper_jobs_sequence_advance
    AFTER DELETE ON hopper_jobs
    REFERENCING OLD TABLE AS hopper_old_jobs
    FOR EACH STATEMENT
    EXECUTE FUNCTION hopper_sequence_advance();

-- An operator's skip of a blocked sequence's head: the block goes, the
-- next job becomes the head; the dead head stays dead. skipped is false
-- when the key was not blocked (nothing changes). Serialized with the
-- key's enqueues by its lock.
CREATE FUNCTION hopper_sequence_skip(sequence_key text, OUT skipped boolean, OUT promoted bigint)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_variable
BEGIN
    PERFORM pg_advisory_xact_lock(hopper_sequence_lock_id(sequence_key));
    DELETE FROM hopper_sequence_blocks AS b WHERE b.sequence_key = sequence_key;
    skipped := FOUND;
    IF skipped THEN
        promoted := hopper_sequence_promote(sequence_key);
    END IF;
END;
$$;

-- The SQL API places a job of a sequence as Go does: it takes the key's
-- lock before the insert and inserts the job waiting (the commit places
-- it). The checks stay in the function renamed here; the new
-- hopper_enqueue_values adds the sequence's part (and so is VOLATILE: it
-- takes a lock).
ALTER FUNCTION hopper_enqueue_values(text, text, text, jsonb, integer, text, integer, timestamptz, interval, text, integer, jsonb, text)
    RENAME TO hopper_enqueue_values_checked;

CREATE FUNCTION hopper_enqueue_values(
    prefix text, kind_prefix text,
    kind text, payload jsonb, version integer, queue text, priority integer,
    run_at timestamptz, delay interval, unique_key text, max_attempts integer,
    meta jsonb, concurrency_key text,
    OUT o_queue text, OUT o_version integer, OUT o_priority smallint, OUT o_run_at timestamptz,
    OUT o_state text, OUT o_max_attempts integer, OUT o_meta jsonb)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_variable
DECLARE
    k jsonb;
BEGIN
    SELECT * INTO o_queue, o_version, o_priority, o_run_at, o_state, o_max_attempts, o_meta
    FROM hopper_enqueue_values_checked(prefix, kind_prefix, kind, payload, version, queue, priority,
                                       run_at, delay, unique_key, max_attempts, meta, concurrency_key);
    k := o_meta -> 'hopper.sequence';
    IF k IS NULL THEN
        RETURN;
    END IF;
    IF jsonb_typeof(k) <> 'string' OR octet_length(k #>> '{}') NOT BETWEEN 1 AND 255 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = prefix || 'hopper: invalid sequence key: meta''s "hopper.sequence" must be a string of 1 to 255 bytes',
            HINT = 'name the sequence: {"hopper.sequence": "customer-42"}';
    END IF;
    IF coalesce(o_meta ->> 'hopper.sequence_policy', 'block') NOT IN ('block', 'continue') THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = prefix || 'hopper: invalid sequence policy "' || (o_meta ->> 'hopper.sequence_policy') || '"',
            HINT = 'meta''s "hopper.sequence_policy" is "block" (the default) or "continue"';
    END IF;
    PERFORM pg_advisory_xact_lock(hopper_sequence_lock_id(k #>> '{}'));
    o_state := 'waiting';
END;
$$;

-- A batch takes its sequence keys' locks before its first job, all at
-- once and in one hash order, as Go's batches do: taken job by job, in the
-- array's order, two batches naming the same keys in opposite orders
-- would deadlock. (Each job's lock in hopper_enqueue_values is then taken
-- again, which costs nothing.) A malformed array takes no lock here: the
-- checks of the function renamed below refuse it.
ALTER FUNCTION hopper_enqueue_many(jsonb) RENAME TO hopper_enqueue_many_checked;

CREATE FUNCTION hopper_enqueue_many(jobs jsonb)
RETURNS TABLE (id bigint, inserted boolean)
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF jsonb_typeof(jobs) = 'array' THEN
        PERFORM count(pg_advisory_xact_lock(l.id))
        FROM (SELECT DISTINCT hopper_sequence_lock_id(e -> 'meta' ->> 'hopper.sequence') AS id
              FROM jsonb_array_elements(jobs) AS e
              WHERE jsonb_typeof(e) = 'object' AND jsonb_typeof(e -> 'meta') = 'object'
                AND jsonb_typeof(e -> 'meta' -> 'hopper.sequence') = 'string'
              ORDER BY 1) AS l;
    END IF;
    RETURN QUERY SELECT c.id, c.inserted FROM hopper_enqueue_many_checked(jobs) AS c;
END;
$$;

DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION %1$I.hopper_enqueue_many(jsonb) SET search_path = %1$I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION %1$I.hopper_enqueue_values(text, text, text, jsonb, integer, text, integer, timestamptz, interval, text, integer, jsonb, text) SET search_path = %1$I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION %1$I.hopper_sequence_lock_id(text) SET search_path = %1$I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION %1$I.hopper_sequence_promote(text) SET search_path = %1$I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION %1$I.hopper_sequence_promote_keys(text[]) SET search_path = %1$I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION %1$I.hopper_sequence_collect() SET search_path = %1$I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION %1$I.hopper_sequence_place() SET search_path = %1$I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION %1$I.hopper_sequence_advance() SET search_path = %1$I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION %1$I.hopper_sequence_skip(text) SET search_path = %1$I, pg_temp', current_schema());
END;
$$;
