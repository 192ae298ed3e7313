-- Flow control. A job may carry a concurrency key (a customer, a tenant, an
-- API account): workers configured with a per-key limit never run more jobs
-- of one key at once, across all processes; a fair queue claims round-robin
-- across keys. The key travels with the job into the dead table and the
-- history, so a retried dead job keeps its key. NULL is none, as for meta.
ALTER TABLE hopper_jobs
    ADD COLUMN concurrency_key text,
    ADD CONSTRAINT hopper_jobs_concurrency_key_check CHECK (char_length(concurrency_key) BETWEEN 1 AND 255) NOT VALID;
ALTER TABLE hopper_jobs VALIDATE CONSTRAINT hopper_jobs_concurrency_key_check;
ALTER TABLE hopper_dead_jobs ADD COLUMN concurrency_key text;
ALTER TABLE hopper_job_history ADD COLUMN concurrency_key text;

-- Keyed jobs only (jobs without a key pay nothing for it), by queue, state
-- and key: the running jobs of a key are counted from (queue, 'running',
-- key), a key's next ready job is the first entry of (queue, 'pending',
-- key), and the keys with ready work are found by skipping from one key to
-- the next.
CREATE INDEX hopper_jobs_key_idx ON hopper_jobs (queue, state, concurrency_key, priority, run_at, id)
    WHERE concurrency_key IS NOT NULL;

-- When a queue's priorities were last aged (FlowControl.PriorityAging): the
-- workers age them at most once per interval, by compare-and-set.
ALTER TABLE hopper_queues ADD COLUMN aged_at timestamptz;

-- The first max_keys keys with ready jobs in a queue after after_key, in
-- order, skipping keys with key_limit or more running jobs (0: none
-- skipped): a skip scan of hopper_jobs_key_idx, one index descent per key
-- however many jobs each key has (and one more per key to count its
-- running jobs, when key_limit is set). It looks at 20 times max_keys keys
-- at most. Claims go round the keys with it.
CREATE FUNCTION hopper_ready_keys(in_queue text, after_key text, max_keys integer, key_limit integer)
RETURNS SETOF text
LANGUAGE sql STABLE AS $$
    WITH RECURSIVE keys AS (
        SELECT first.key, first.open, first.open::integer AS found, 1 AS steps
        FROM (SELECT k.key,
                     key_limit <= 0 OR (SELECT count(*) FROM (SELECT FROM hopper_jobs AS r
                                                             WHERE r.queue = in_queue AND r.state = 'running'
                                                               AND r.concurrency_key = k.key
                                                             LIMIT key_limit) AS busy) < key_limit AS open
              FROM (SELECT min(j.concurrency_key) AS key
                    FROM hopper_jobs AS j
                    WHERE j.queue = in_queue AND j.state = 'pending' AND j.concurrency_key > after_key) AS k) AS first
        UNION ALL
        SELECT nxt.key, nxt.open, keys.found + nxt.open::integer, keys.steps + 1
        FROM keys
        CROSS JOIN LATERAL (
            SELECT k.key,
                   key_limit <= 0 OR (SELECT count(*) FROM (SELECT FROM hopper_jobs AS r
                                                           WHERE r.queue = in_queue AND r.state = 'running'
                                                             AND r.concurrency_key = k.key
                                                           LIMIT key_limit) AS busy) < key_limit AS open
            FROM (SELECT min(j.concurrency_key) AS key
                  FROM hopper_jobs AS j
                  WHERE j.queue = in_queue AND j.state = 'pending' AND j.concurrency_key > keys.key) AS k
        ) AS nxt
        WHERE keys.key IS NOT NULL AND keys.found < max_keys AND keys.steps < 20 * max_keys
    )
    SELECT keys.key FROM keys WHERE keys.key IS NOT NULL AND keys.open
$$;

-- Global rate limits: one row per claim that took jobs under a limit, with
-- how many it took per group (the queue: '', a kind or a key) and the limit
-- it ran with (for stats). A claim counts the rows of its window and
-- removes older ones; claims under a limit are serialized per queue, so the
-- window's count is exact.
CREATE TABLE hopper_rate_claims (
    queue      text        NOT NULL,
    rate_group text        NOT NULL,
    claimed_at timestamptz NOT NULL,
    jobs       integer     NOT NULL,
    rate_limit integer     NOT NULL,
    window_ms  bigint      NOT NULL
);
CREATE INDEX hopper_rate_claims_idx ON hopper_rate_claims (queue, claimed_at);

-- The view of all jobs gains the key.
DROP VIEW hopper_all_jobs;
CREATE VIEW hopper_all_jobs AS
SELECT j.id, j.queue, j.kind, j.version, j.payload, j.state, j.priority, j.run_at,
       j.attempt, j.max_attempts, j.lease_owner, j.lease_until, j.unique_key, j.errors,
       j.created_at, NULL::timestamptz AS finished_at, NULL::text AS reason, NULL::jsonb AS result,
       j.meta, j.concurrency_key
FROM hopper_jobs AS j
UNION ALL
SELECT d.id, d.queue, d.kind, d.version, d.payload, d.state, d.priority, d.run_at,
       d.attempt, d.max_attempts, NULL::text, NULL::timestamptz, d.unique_key, d.errors,
       d.created_at, d.died_at, d.reason, NULL::jsonb, d.meta, d.concurrency_key
FROM hopper_dead_jobs AS d
UNION ALL
SELECT h.id, h.queue, h.kind, h.version, h.payload, 'completed'::text, h.priority, h.run_at,
       h.attempt, h.max_attempts, NULL::text, NULL::timestamptz, h.unique_key, h.errors,
       h.created_at, h.finished_at, NULL::text, h.result, h.meta, h.concurrency_key
FROM hopper_job_history AS h;
