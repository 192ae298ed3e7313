-- Per-key concurrency limits chosen per key, and limits shared by several
-- kinds (issue 63, item 3).
--
-- FlowControl.KeyLimit and the KeyLimit handle option give every key of a
-- queue (or of a kind) the same limit; a service with tiers wants a
-- premium tenant's key at 10 running jobs and a free one's at 1, and
-- wants to move a tenant between tiers without restarting its workers.
-- A row here sets one key's limit in one queue; it overrides the queue's
-- and the kind's limits for that key, in the queues that a worker claims
-- under flow control, from the next claim on. Exact keys only: a claim
-- looks a key's row up by primary key, one index probe, where a pattern
-- would cost a scan of the patterns for every job it considers.
--
-- hopper_ready_keys, which a fair claim (and a strict one crowded by keys
-- at their limit) goes round the keys with, skips the keys at their
-- limit: it now reads the key's row too, or a premium key would be
-- skipped at the queue's limit.
--
-- New tables and a function replaced: replacing the function reads
-- hopper_jobs's definition (AccessShareLock, which waits only behind a
-- migration's ACCESS EXCLUSIVE), no lock that blocks the queue.
--
-- Guarded by: worker/TestKeyLimitTable, worker/TestKeyLimitChangesAtRunTime,
-- worker/TestSharedLimitAcrossWorkers, hopper/TestKeyLimitsAPI.
CREATE TABLE hopper_key_limits (
    queue       text              NOT NULL,
    -- compared with hopper_jobs.concurrency_key, byte for byte
    key         text COLLATE "C"  NOT NULL,
    max_running integer           NOT NULL CHECK (max_running BETWEEN 1 AND 1000000),
    updated_at  timestamptz       NOT NULL DEFAULT now(),
    PRIMARY KEY (queue, key)
);

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

-- Limits shared by several kinds (worker.SharedLimit): each worker
-- records, as it starts, the name of the limit each of its kinds runs
-- under, so that a claim counts the running jobs of every kind of the
-- limit, those that only other workers run included. A kind is under one
-- shared limit at most.
CREATE TABLE hopper_shared_limits (
    kind        text        PRIMARY KEY,
    name        text        NOT NULL,
    max_running integer     NOT NULL CHECK (max_running BETWEEN 1 AND 1000000),
    recorded_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX hopper_shared_limits_name_idx ON hopper_shared_limits (name);
