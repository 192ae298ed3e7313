-- Undoes 000031: the function as migration 6 made it, and no key limits.
DROP TABLE hopper_shared_limits;
DROP TABLE hopper_key_limits;

CREATE OR REPLACE FUNCTION hopper_ready_keys(in_queue text, after_key text, max_keys integer, key_limit integer)
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
