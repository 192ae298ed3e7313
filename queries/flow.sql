-- name: LockClaims :exec
-- Serializes the claims of one queue under flow control: a claim that
-- counts running jobs per key, or jobs claimed in a rate window, must see
-- every claim that committed before it. It runs first in the claim's
-- transaction (DequeueLimited then takes its snapshot after the lock is
-- granted) and holds until commit. The lock is named by the job table's
-- oid and the queue, so schemas sharing a database do not wait on each
-- other (a hash collision can only make two queues wait, never break a
-- limit).
--
-- It also takes a lock per shared limit (shared_names, parallel to the
-- claim's kinds; '' none), after the queue's and in the order of the
-- locks' numbers, so that claims of different queues under one shared
-- limit take turns too. Every claim takes its queue's lock first and
-- then shared limits' in one order, on locks of their own first number,
-- so no two claims wait on each other in a cycle.
SELECT pg_advisory_xact_lock(l.k1, l.k2)
FROM (SELECT 0 AS step, to_regclass('hopper_jobs')::oid::integer AS k1, hashtext(@queue::text) AS k2
      UNION
      SELECT 1, -(to_regclass('hopper_jobs')::oid::integer), hashtext(s.name)
      FROM unnest(@shared_names::text[]) AS s(name)
      WHERE s.name <> ''
      ORDER BY 1, 3) AS l;

-- name: DequeueLimited :many
-- Dequeue for a queue under flow control; run in a transaction after
-- LockClaims. It claims up to max_jobs ready jobs, as Dequeue does (kinds,
-- versions, pause, lease, attempt), with three more rules:
--
--  * Per-key concurrency. A job with a concurrency key whose limit is set
--    (key_limits[i] for kinds[i], else key_limit; 0 is none) is claimed only
--    while fewer than the limit of that key's jobs are running in the
--    queue. Running means state running, so a crashed worker's job holds
--    its slot until the sweep takes it back, and a lost lease frees it.
--  * Limits by key. A key's row in hopper_key_limits (queue, key) sets
--    its limit, over the kind's and the queue's, read at every claim.
--  * Shared limits. A kind under a shared limit (shared_names[i] for
--    kinds[i], '' none; shared_max[i] its most running jobs) is claimed
--    only while fewer than the limit of the jobs of every kind under that
--    name (hopper_shared_limits, and the claim's own kinds) run, in any
--    queue: LockClaims took the name's lock.
--  * A rate limit. With rate_limit > 0, no more than rate_limit jobs of a
--    group (rate_by: 'queue', 'kind' or 'key') are claimed in any window of
--    rate_window_ms: every claim logs what it took in hopper_rate_claims,
--    counts the log's rows in its window and removes older ones. With
--    exact_starts, its rows await the worker's RateClaimStarted, which
--    moves them to its last handler start.
--  * Fairness. With fair, the claim goes round-robin across keys: it takes
--    the next keys with ready work after after_key (up to max_jobs of them,
--    skipping from key to key in hopper_jobs_key_idx, and past keys with
--    key_limit running jobs), a share of each
--    one's first jobs, and orders them first by their rank within their key,
--    then by priority, run_at and id; jobs without a key count as one more
--    key, found among the queue's first scan ready jobs.
--
-- Without fair the order is Dequeue's, among the first scan ready jobs
-- after the claim cursor (after_priority, after_run_at, after_id: the
-- worker keeps it as for Dequeue, and moves it back to a keyed job whose
-- result it records, since jobs of that key held back by its limit stand
-- after it) that their keys' limits let run. When those are crowded by
-- keys at their limit (the scan is full and lets fewer than half of
-- max_jobs run; a claim a little short takes what runs), the claim also
-- takes the next keys with ready work after after_key, as a fair claim
-- does, so one key's backlog never blocks the others' jobs behind it.
WITH clock AS MATERIALIZED (
    -- the claim's time, and the times computed from it that the writes
    -- compare or store: Citus refuses a write that adds an interval to a
    -- column (docs/scaling-out.md)
    SELECT c.at,
           c.at + '1 millisecond'::interval * @lease_ms::bigint AS lease_until,
           c.at - '1 millisecond'::interval * @rate_window_ms::bigint AS window_start,
           c.at - '5 seconds'::interval - '1 millisecond'::interval * @rate_window_ms::bigint AS starts_window_start
    FROM (SELECT clock_timestamp() AS at) AS c
), paused AS MATERIALIZED (
    SELECT EXISTS (SELECT 1 FROM hopper_queues AS q
                   WHERE q.name = @queue::text AND q.paused_at IS NOT NULL) AS yes
), tiered AS MATERIALIZED (
    -- whether some key of the queue has a limit of its own: only then is
    -- the table read per job
    SELECT EXISTS (SELECT 1 FROM hopper_key_limits AS l WHERE l.queue = @queue::text) AS yes
), running AS MATERIALIZED (
    -- how many of the queue's jobs run under each key: a row per key,
    -- ranked first within its key before the jobs a claim considers, so
    -- they count against its limit without a join (a join to a CTE, which
    -- has no statistics, may be planned as a scan of it per job); none
    -- are read without a limit
    SELECT r.concurrency_key, count(1) AS jobs
    FROM hopper_jobs AS r
    WHERE (@key_limit::integer > 0 OR 0 < ANY (@key_limits::integer[]) OR (SELECT yes FROM tiered))
      AND r.queue = @queue::text AND r.state = 'running' AND r.concurrency_key IS NOT NULL
    GROUP BY r.concurrency_key
), shared_running AS MATERIALIZED (
    -- how many jobs run under each of the claim's shared limits, of every
    -- kind recorded under the name and of the claim's own kinds under it,
    -- counted up to the limit only: a limit reached is reached, and the
    -- count stops there whatever the number of running jobs
    SELECT n.name,
           (SELECT count(1)::integer
            FROM (SELECT 1
                  FROM hopper_jobs AS r
                  WHERE r.state = 'running'
                    AND r.kind IN (SELECT s.kind FROM hopper_shared_limits AS s WHERE s.name = n.name
                                   UNION
                                   SELECT u.kind FROM unnest(@kinds::text[]) WITH ORDINALITY AS u(kind, i)
                                   WHERE (@shared_names::text[])[u.i] = n.name)
                  LIMIT n.most) AS r) AS jobs
    FROM (SELECT (@shared_names::text[])[u.i] AS name, max((@shared_max::integer[])[u.i]) AS most
          FROM unnest(@kinds::text[]) WITH ORDINALITY AS u(kind, i)
          WHERE (@shared_names::text[])[u.i] <> ''
          GROUP BY 1) AS n
), used AS MATERIALIZED (
    -- a claim whose handlers may still be starting (ExactStarts, not yet
    -- moved to its last start) counts until it is moved, or for a grace of
    -- five seconds past its window if its worker never moves it
    SELECT c.rate_group, sum(c.jobs)::integer AS jobs
    FROM hopper_rate_claims AS c, clock
    WHERE @rate_limit::integer > 0
      AND c.queue = @queue::text
      AND (c.claimed_at > clock.at - '1 millisecond'::interval * @rate_window_ms::bigint
           OR (c.awaiting_starts
               AND c.claimed_at > clock.at - '5 seconds'::interval - '1 millisecond'::interval * @rate_window_ms::bigint))
    GROUP BY c.rate_group
), head AS MATERIALIZED (
    -- the first scan ready jobs after the claim cursor, in Dequeue's order
    SELECT j.id, j.kind, j.concurrency_key, j.priority, j.run_at,
           coalesce(CASE WHEN (SELECT yes FROM tiered) AND j.concurrency_key IS NOT NULL
                         THEN (SELECT l.max_running FROM hopper_key_limits AS l
                               WHERE l.queue = @queue::text AND l.key = j.concurrency_key) END,
                    nullif((@key_limits::integer[])[array_position(@kinds::text[], j.kind)], 0), nullif(@key_limit::integer, 0)) AS key_limit
    FROM hopper_jobs AS j
    WHERE NOT (SELECT yes FROM paused)
      AND j.state = 'pending'
      AND j.queue = @queue::text
      AND (j.priority, j.run_at, j.id) > (@after_priority::smallint, @after_run_at::timestamptz, @after_id::bigint)
      AND j.run_at <= now()
      AND j.version <= (@max_versions::integer[])[array_position(@kinds::text[], j.kind)]
    ORDER BY j.priority, j.run_at, j.id
    LIMIT @scan::integer
), head_end AS MATERIALIZED (
    -- the last job of the head, which a strict claim's cursor may not
    -- pass: a round of keys may take jobs far beyond it, past ready jobs
    -- it did not consider
    SELECT h.priority, h.run_at, h.id
    FROM head AS h
    ORDER BY h.priority DESC, h.run_at DESC, h.id DESC
    LIMIT 1
), open_head AS MATERIALIZED (
    -- strict: those its key's limit lets run (ranked within their key
    -- after its running jobs, no further than the limit); fair: those
    -- without a key
    SELECT h.id, h.kind, h.concurrency_key, h.priority, h.run_at
    FROM (SELECT u.id, u.kind, u.concurrency_key, u.priority, u.run_at, u.key_limit, u.considered,
                 sum(u.jobs) OVER (PARTITION BY u.concurrency_key COLLATE "C"
                                   ORDER BY u.considered, u.priority, u.run_at, u.id
                                   ROWS UNBOUNDED PRECEDING) AS key_rank
          FROM (SELECT hd.id, hd.kind, hd.concurrency_key, hd.priority, hd.run_at, hd.key_limit, true AS considered, 1::bigint AS jobs
                FROM head AS hd
                UNION ALL
                SELECT 0, '', r.concurrency_key, 0, 'epoch', NULL::integer, false, r.jobs
                FROM running AS r
                WHERE NOT @fair::boolean) AS u) AS h
    WHERE h.considered
      AND CASE WHEN @fair::boolean THEN h.concurrency_key IS NULL
               ELSE h.concurrency_key IS NULL OR h.key_limit IS NULL OR h.key_rank <= h.key_limit
          END
), round_keys AS MATERIALIZED (
    -- the next keys with ready work: always when fair, else only when the
    -- head is crowded by keys at their limit, so that fewer than half the
    -- jobs asked for may run (a round costs more than the claim: a claim
    -- a little short is cheaper, and the worker claims again when a keyed
    -- job of its own ends)
    SELECT k::text AS key
    FROM hopper_ready_keys(@queue::text, @after_key::text, @max_jobs::integer, @key_limit::integer) AS k
    WHERE NOT (SELECT yes FROM paused)
      AND (@fair::boolean
           OR ((SELECT count(1) FROM head) >= @scan::integer AND (SELECT count(1) FROM open_head) * 2 < @max_jobs::integer))
), simple AS MATERIALIZED (
    -- the usual strict claim (no rate limit, no round of keys): the open
    -- head, in order, is the answer, and the second pass below is skipped
    SELECT NOT @fair::boolean AND @rate_limit::integer <= 0
           AND NOT coalesce('' < ANY (@shared_names::text[]), false)
           AND NOT EXISTS (SELECT 1 FROM round_keys) AS yes
), key_share AS MATERIALIZED (
    SELECT (greatest(@max_jobs::integer, 1) - 1) / greatest(count(1)::integer, 1) + 1 AS jobs
    FROM round_keys
), candidates AS (
    SELECT o.id, o.kind, o.concurrency_key, o.priority, o.run_at
    FROM open_head AS o
    UNION
    -- each round key's share of its first ready jobs
    SELECT r.id, r.kind, r.concurrency_key, r.priority, r.run_at
    FROM round_keys AS rk
    CROSS JOIN LATERAL (
        SELECT j.id, j.kind, j.concurrency_key, j.priority, j.run_at
        FROM hopper_jobs AS j
        WHERE j.queue = @queue::text
          AND j.state = 'pending'
          AND j.concurrency_key = rk.key
          AND j.run_at <= now()
          AND j.version <= (@max_versions::integer[])[array_position(@kinds::text[], j.kind)]
        ORDER BY j.priority, j.run_at, j.id
        LIMIT (SELECT key_share.jobs FROM key_share)
    ) AS r
), keyed AS (
    -- the candidates ranked within their key after its running jobs
    SELECT c.id, c.kind, c.concurrency_key, c.priority, c.run_at, c.considered,
           sum(c.jobs) OVER (PARTITION BY c.concurrency_key COLLATE "C" ORDER BY c.considered, c.priority, c.run_at, c.id
                             ROWS UNBOUNDED PRECEDING) AS key_rank,
           coalesce(CASE WHEN (SELECT yes FROM tiered) AND c.concurrency_key IS NOT NULL
                         THEN (SELECT l.max_running FROM hopper_key_limits AS l
                               WHERE l.queue = @queue::text AND l.key = c.concurrency_key) END,
                    nullif((@key_limits::integer[])[array_position(@kinds::text[], c.kind)], 0), nullif(@key_limit::integer, 0)) AS key_limit,
           CASE @rate_by::text WHEN 'kind' THEN c.kind WHEN 'key' THEN coalesce(c.concurrency_key, '') ELSE '' END AS rate_group
    FROM (SELECT cd.id, cd.kind, cd.concurrency_key, cd.priority, cd.run_at, true AS considered, 1::bigint AS jobs
          FROM candidates AS cd
          UNION ALL
          SELECT 0, '', r.concurrency_key, 0, 'epoch', false, r.jobs
          FROM running AS r) AS c
    WHERE NOT (SELECT yes FROM simple)
), within_key AS (
    SELECT k.id, k.concurrency_key, k.priority, k.run_at, k.key_rank, k.rate_group,
           nullif((@shared_names::text[])[array_position(@kinds::text[], k.kind)], '') AS shared_name,
           (@shared_max::integer[])[array_position(@kinds::text[], k.kind)] AS shared_max
    FROM keyed AS k
    WHERE k.considered
      AND (k.concurrency_key IS NULL OR k.key_limit IS NULL OR k.key_rank <= k.key_limit)
), within_shared AS (
    -- ranked within their shared limit after its running jobs
    SELECT w.id, w.concurrency_key, w.priority, w.run_at, w.key_rank, w.rate_group, w.shared_name, w.shared_max,
           row_number() OVER (PARTITION BY w.shared_name COLLATE "C"
                              ORDER BY CASE WHEN @fair::boolean THEN w.key_rank ELSE 0 END, w.priority, w.run_at, w.id)
             + coalesce((SELECT sr.jobs FROM shared_running AS sr WHERE sr.name = w.shared_name), 0) AS shared_rank
    FROM within_key AS w
), within_rate AS (
    SELECT s.id, s.concurrency_key, s.priority, s.run_at, s.key_rank, s.rate_group,
           row_number() OVER (PARTITION BY s.rate_group COLLATE "C"
                              ORDER BY CASE WHEN @fair::boolean THEN s.key_rank ELSE 0 END, s.priority, s.run_at, s.id) AS rate_rank
    FROM within_shared AS s
    WHERE s.shared_name IS NULL OR s.shared_rank <= s.shared_max
), allowed AS (
    (SELECT o.id, ''::text AS rate_group
     FROM open_head AS o
     WHERE (SELECT yes FROM simple)
     ORDER BY o.priority, o.run_at, o.id
     LIMIT @max_jobs::integer)
    UNION ALL
    (SELECT w.id, w.rate_group
     FROM within_rate AS w
     LEFT JOIN used ON used.rate_group = w.rate_group
     WHERE @rate_limit::integer <= 0
        OR w.rate_rank + coalesce(used.jobs, 0) <= @rate_limit::integer
     ORDER BY CASE WHEN @fair::boolean THEN w.key_rank ELSE 0 END, w.priority, w.run_at, w.id
     LIMIT @max_jobs::integer)
), picked AS (
    -- by primary key, an array lookup: a join here lets the planner hash
    -- the whole table when it guesses many rows
    SELECT j.id
    FROM hopper_jobs AS j
    WHERE j.id = ANY (ARRAY(SELECT allowed.id FROM allowed))
      -- checked again on the locked row; written so that it does not
      -- match the ready index's predicate, which would make the planner
      -- AND a bitmap of every ready job with the few ids wanted
      AND coalesce(j.state, '') = 'pending'
    FOR UPDATE OF j SKIP LOCKED
), logged AS (
    INSERT INTO hopper_rate_claims (queue, rate_group, claimed_at, jobs, rate_limit, window_ms, awaiting_starts)
    SELECT @queue::text, allowed.rate_group, clock.at, count(1), @rate_limit::integer, @rate_window_ms::bigint, @exact_starts::boolean
    FROM picked
    JOIN allowed ON allowed.id = picked.id
    CROSS JOIN clock
    WHERE @rate_limit::integer > 0
    GROUP BY allowed.rate_group, clock.at
), pruned AS (
    DELETE FROM hopper_rate_claims AS c
    USING clock
    WHERE @rate_limit::integer > 0
      AND c.queue = @queue::text
      AND c.claimed_at <= clock.window_start
      AND (NOT c.awaiting_starts OR c.claimed_at <= clock.starts_window_start)
)
UPDATE hopper_jobs AS j
SET state       = 'running',
    attempt     = j.attempt + 1,
    lease_owner = @owner::text,
    -- from the moment the claim held its lock: the lease, and the claim
    -- time (lease_until - lease_ms) that rate limits count, are exact
    lease_until = (SELECT clock.lease_until FROM clock)
WHERE j.id = ANY (ARRAY(SELECT picked.id FROM picked))
RETURNING sqlc.embed(j),
          -- the head's last job (priority -1: none)
          coalesce((SELECT he.priority FROM head_end AS he), -1)::smallint AS head_priority,
          coalesce((SELECT he.run_at FROM head_end AS he), 'epoch')::timestamptz AS head_run_at,
          coalesce((SELECT he.id FROM head_end AS he), 0)::bigint AS head_id;

-- name: AgePriorities :execrows
-- Priority aging for a queue: at most once per aging_ms across all workers
-- (compare-and-set on hopper_queues.aged_at), every ready job that has
-- waited longer than aging_ms moves one priority step up (its number goes
-- down by one, to 0 at the least), up to max_jobs of them, the longest
-- waiting first. A job that has waited k intervals has gained about k steps,
-- so a low priority cannot starve behind a steady stream of higher ones.
WITH due AS (
    UPDATE hopper_queues AS q
    SET aged_at = now()
    WHERE q.name = @queue::text
      AND (q.aged_at IS NULL OR q.aged_at <= now() - '1 millisecond'::interval * @aging_ms::bigint)
    RETURNING q.name
), aged AS (
    SELECT j.id
    FROM hopper_jobs AS j
    JOIN due ON due.name = j.queue
    WHERE j.state = 'pending'
      AND j.priority > 0
      AND j.run_at <= now() - '1 millisecond'::interval * @aging_ms::bigint
    ORDER BY j.run_at
    LIMIT @max_jobs::integer
    FOR UPDATE OF j SKIP LOCKED
)
UPDATE hopper_jobs AS j
SET priority = j.priority - 1
FROM aged
WHERE j.id = aged.id;

-- name: RateClaimStarted :exec
-- Moves a claim's rows in the rate log (claimed_at: the claim's time, its
-- jobs' lease_until less the lease), made with exact_starts, to now, once
-- the worker has started the handlers of all its jobs: the next budget then
-- returns a window after the last of them started, not after the claim, so
-- that no window of handler starts holds more than the limit either.
-- The clock is read in a subquery: Citus refuses a write that calls a
-- function that is not immutable beside a column (docs/scaling-out.md).
UPDATE hopper_rate_claims AS c
SET claimed_at = greatest(c.claimed_at, clock.at), awaiting_starts = false
FROM (SELECT clock_timestamp() AS at) AS clock
WHERE c.queue = @queue::text
  AND c.claimed_at = @claimed_at::timestamptz
  AND c.awaiting_starts;

-- name: ProbeRateStarts :exec
-- Fails (undefined_column) on a schema older than migration 8: a worker
-- with a global rate limit checks this as it starts, since its claims
-- read awaiting_starts.
SELECT c.awaiting_starts FROM hopper_rate_claims AS c LIMIT 0;

-- name: RateWait :one
-- How long, in milliseconds, until the oldest claim in a queue's rate
-- window leaves it and gives its budget back (0: the window is empty).
-- A worker whose claim was cut short by its rate limit sleeps that long
-- rather than polling; a claim still awaiting the starts of its handlers
-- past its window (see DequeueLimited) gives 10ms, as it is moved any
-- moment.
WITH clock AS (
    SELECT clock_timestamp() AS at, '1 millisecond'::interval * @rate_window_ms::bigint AS width
), counted AS (
    SELECT CASE WHEN c.awaiting_starts THEN greatest(c.claimed_at, clock.at - clock.width + '10 milliseconds'::interval)
                ELSE c.claimed_at END AS at
    FROM hopper_rate_claims AS c, clock
    WHERE c.queue = @queue::text
      AND (c.claimed_at > clock.at - clock.width
           OR (c.awaiting_starts AND c.claimed_at > clock.at - clock.width - '5 seconds'::interval))
)
SELECT coalesce(ceil(1000 * extract(epoch FROM (SELECT min(counted.at) FROM counted) + clock.width - clock.at)), 0)::bigint AS wait_ms
FROM clock;

-- name: KeyStats :many
-- The keys with the most ready jobs (ties: the most running), per queue
-- (queue '' : every queue), up to max_keys: what flow control holds back.
SELECT j.queue, j.concurrency_key::text AS concurrency_key,
       count(*) FILTER (WHERE j.state = 'pending')::bigint AS ready,
       count(*) FILTER (WHERE j.state = 'running')::bigint AS running,
       count(*) FILTER (WHERE j.state = 'scheduled')::bigint AS scheduled
FROM hopper_jobs AS j
WHERE j.concurrency_key IS NOT NULL
  AND (@queue::text = '' OR j.queue = @queue::text)
GROUP BY j.queue, j.concurrency_key
ORDER BY ready DESC, running DESC, j.queue, j.concurrency_key
LIMIT @max_keys::integer;

-- name: RateStats :many
-- Global rate limits in use, per queue and group: the limit and window
-- the latest claim ran with, and how many jobs were claimed in that
-- window up to now (the budget left is the difference).
WITH latest AS (
    SELECT DISTINCT ON (c.queue) c.queue, c.rate_limit, c.window_ms
    FROM hopper_rate_claims AS c
    ORDER BY c.queue, c.claimed_at DESC
)
SELECT latest.queue, c.rate_group, latest.rate_limit, latest.window_ms,
       sum(c.jobs)::bigint AS used
FROM latest
JOIN hopper_rate_claims AS c
  ON c.queue = latest.queue
 AND c.claimed_at > now() - '1 millisecond'::interval * latest.window_ms
GROUP BY latest.queue, c.rate_group, latest.rate_limit, latest.window_ms
ORDER BY latest.queue, c.rate_group;

-- name: RecordFlowControl :many
-- Records the flow control a starting worker runs its queues with
-- (flows[i] for names[i]: its description, '' for none; the queues are
-- registered already) and returns, for each queue whose record said
-- otherwise, what it said, who recorded it and when: every worker of a
-- queue must run with the same flow control. Rows are locked in name
-- order, so that workers starting together see each other's records.
WITH given AS (
    SELECT unnest(@names::text[]) AS name, unnest(@flows::text[]) AS flow
), earlier AS (
    SELECT q.name, q.flow_control, q.flow_control_by, q.flow_control_at
    FROM hopper_queues AS q
    JOIN given ON given.name = q.name
    ORDER BY q.name
    FOR UPDATE OF q
), recorded AS (
    -- runs whether or not it is read, as every data-modifying CTE does
    UPDATE hopper_queues AS q
    SET flow_control = given.flow, flow_control_by = @worker::text, flow_control_at = now()
    FROM given, earlier
    WHERE q.name = given.name AND earlier.name = given.name
)
SELECT earlier.name, earlier.flow_control::text AS flow_control,
       coalesce(earlier.flow_control_by, '')::text AS flow_control_by,
       coalesce(earlier.flow_control_at, 'epoch')::timestamptz AS flow_control_at
FROM earlier
JOIN given ON given.name = earlier.name
WHERE earlier.flow_control IS NOT NULL
  AND earlier.flow_control <> given.flow
  AND earlier.flow_control_by IS DISTINCT FROM @worker::text
ORDER BY earlier.name;

-- name: RecordSharedLimits :exec
-- Records the shared limit of each of a starting worker's kinds
-- (names[i], max_running[i] for kinds[i]; '' none): kinds under one are
-- written, the others' records removed, so that every worker's claims
-- count the running jobs of each kind of a limit.
WITH given AS (
    SELECT g.kind, (@names::text[])[g.i] AS name, (@max_running::integer[])[g.i] AS max_running
    FROM unnest(@kinds::text[]) WITH ORDINALITY AS g(kind, i)
), removed AS (
    DELETE FROM hopper_shared_limits AS s
    USING given
    WHERE s.kind = given.kind AND given.name = ''
)
INSERT INTO hopper_shared_limits (kind, name, max_running)
SELECT given.kind, given.name, given.max_running
FROM given
WHERE given.name <> ''
ORDER BY given.kind
-- recorded_at is excluded's, the default now(): Citus refuses a function in DO UPDATE SET.
ON CONFLICT (kind) DO UPDATE SET name = excluded.name, max_running = excluded.max_running, recorded_at = excluded.recorded_at;

-- name: SetKeyLimit :exec
-- Sets one key's limit in a queue (hopper_key_limits): the next claim of
-- the queue under flow control holds the key to it.
INSERT INTO hopper_key_limits (queue, key, max_running)
VALUES (@queue::text, @key::text, @max_running::integer)
-- updated_at is excluded's, the default now(): Citus refuses a function in DO UPDATE SET.
ON CONFLICT (queue, key) DO UPDATE SET max_running = excluded.max_running, updated_at = excluded.updated_at;

-- name: DeleteKeyLimit :execrows
-- Removes one key's limit: the key is limited by its kind's or queue's
-- KeyLimit again from the next claim.
DELETE FROM hopper_key_limits AS l
WHERE l.queue = @queue::text AND l.key = @key::text;

-- name: ListKeyLimits :many
-- The keys' own limits, of one queue (an empty queue: every queue), with how many of
-- each key's jobs run now.
SELECT l.queue, l.key::text AS key, l.max_running, l.updated_at,
       (SELECT count(*) FROM hopper_jobs AS j
        WHERE j.queue = l.queue AND j.state = 'running' AND j.concurrency_key = l.key)::bigint AS running
FROM hopper_key_limits AS l
WHERE @queue::text = '' OR l.queue = @queue::text
ORDER BY l.queue, l.key
LIMIT @max_rows::integer;
