-- name: RegisterWorker :one
-- Records a running worker at its start. An id already in the table is
-- taken over only when its holder cannot be running any more: it is gone
-- (no beat within its stale_after_ms), or it is this worker's own row
-- (started_at given: written again after losing it). Host and pid never
-- decide it: containers run as pid 1 and may share a host name, so a live
-- replica started with the same id looks like an earlier run of this very
-- process slot, and taking its row would hand its running jobs to others.
-- What tells one run from another is started_at, which the database
-- records at a run's first write: a takeover happens only past the
-- holder's stale window, after its start, so each run of an id has its
-- own. No row comes back when a live worker holds the id: the caller
-- waits out its stale window and refuses to start if it still beats.
-- took_over says an earlier holder's row was replaced, whose jobs the
-- caller hands back (ReleaseWorkerJobs). started_at is kept by the worker
-- to find its own row (BeatWorker, RemoveWorker). The update reads the
-- statement's now() as excluded.last_seen_at, and its condition uses only
-- immutable operators (a timestamp difference against an interval): Citus
-- refuses other functions in ON CONFLICT on a distributed table
-- (docs/scaling-out.md).
INSERT INTO hopper_workers AS w (id, host, pid, hopper_version, queues, stale_after_ms, started_at, last_seen_at)
VALUES (@id::text, @host::text, @pid::integer, @hopper_version::text, @queues::text[], @stale_after_ms::bigint,
        coalesce(sqlc.narg(started_at)::timestamptz, now()), now())
ON CONFLICT (id) DO UPDATE
SET host           = excluded.host,
    pid            = excluded.pid,
    hopper_version = excluded.hopper_version,
    queues         = excluded.queues,
    stale_after_ms = excluded.stale_after_ms,
    started_at     = excluded.started_at,
    last_seen_at   = excluded.last_seen_at,
    released_at    = NULL
WHERE excluded.last_seen_at - w.last_seen_at > '1 millisecond'::interval * w.stale_after_ms
   OR w.started_at = sqlc.narg(started_at)::timestamptz
-- xmax is zero for a row just inserted, the locking transaction's id for
-- one updated on conflict: the documented way to tell the two apart.
RETURNING w.started_at, (w.xmax <> 0)::boolean AS took_over;

-- name: BeatWorker :one
-- Says the worker is still running: its heartbeat runs it on every beat
-- (BeatInterval).
-- One row, by primary key, plus a look at the (small) table:
--   found: false when the worker's row is gone (pruned while the worker
--     could not reach the database for long), or taken over by another
--     worker started with its id (another started_at); the worker writes
--     it again (RegisterWorker), which a live new holder refuses.
--   released: this worker had been taken to be gone and another worker
--     handed its jobs back since its previous beat: their results will be
--     refused, and the worker checks its claims at once.
--   on_time: this worker's own previous beat is younger than on_time_ms.
--     When it is not, the worker was itself stalled or cut off: it starts
--     counting live_for_ms again from this beat.
--   gone_waiting: another worker is gone and its jobs are still held; the
--     caller runs ReleaseWorkerJobs. A worker judges others only when its
--     own previous beat is on time: one that was itself stalled (a long
--     pause, the database unreachable for all) would otherwise take
--     everyone's jobs the moment it gets through. And it judges only the
--     workers whose stale window it has been live for (live_for_ms: how
--     long its beats have gone through, on time, without a failure): after
--     a database restart every row is stale, and a peer whose first beat
--     failed must get its whole window to beat again, as at any other
--     time, before the first worker back takes its jobs. live_for_ms NULL
--     sets no such bound (tests of the statement alone).
WITH prev AS (
    SELECT w.id, w.last_seen_at, w.released_at
    FROM hopper_workers AS w
    WHERE w.id = @id::text AND w.started_at = @started_at::timestamptz
    FOR UPDATE
), beat AS (
    UPDATE hopper_workers AS w
    SET last_seen_at = now()
    FROM prev
    WHERE w.id = prev.id
    RETURNING w.id
), timely AS (
    SELECT coalesce((SELECT prev.last_seen_at > now() - '1 millisecond'::interval * @on_time_ms::bigint FROM prev), false) AS on_time
)
SELECT EXISTS (SELECT FROM beat)::boolean AS found,
       coalesce((SELECT prev.released_at >= prev.last_seen_at FROM prev), false)::boolean AS released,
       (SELECT timely.on_time FROM timely)::boolean AS on_time,
       ((SELECT timely.on_time FROM timely)
        AND EXISTS (SELECT FROM hopper_workers AS g
                    WHERE g.id <> @id::text
                      AND g.last_seen_at + '1 millisecond'::interval * g.stale_after_ms < now()
                      AND (sqlc.narg(live_for_ms)::bigint IS NULL OR g.stale_after_ms <= sqlc.narg(live_for_ms)::bigint)
                      AND (g.released_at IS NULL OR g.released_at < g.last_seen_at)))::boolean AS gone_waiting;

-- name: RemoveWorker :execrows
-- Deletes a worker's row at its clean stop: only its own (started_at as
-- RegisterWorker returned it), not that of another worker started since
-- under the same id.
DELETE FROM hopper_workers
WHERE id = @id::text AND started_at = @started_at::timestamptz;

-- name: PruneWorkers :execrows
-- Deletes up to max_workers rows of workers gone (no beat within their
-- stale_after_ms) for longer than gone_for_ms. Any worker runs it on its
-- sweep; SKIP LOCKED lets them all at once, and a row a late beat just
-- refreshed is no longer gone when it is locked, so it stays.
DELETE FROM hopper_workers AS gone
WHERE gone.id IN (
    SELECT w.id
    FROM hopper_workers AS w
    WHERE w.last_seen_at + '1 millisecond'::interval * w.stale_after_ms
          < now() - '1 millisecond'::interval * @gone_for_ms::bigint
    ORDER BY w.id
    LIMIT @max_workers::integer
    FOR UPDATE SKIP LOCKED
);

-- name: ListWorkers :many
-- Every worker in the registry, live or gone, with how many jobs each
-- holds now. The count reads the running jobs (no index finds an owner's
-- jobs, and none is kept for it: the claim would pay for it), so it costs
-- what is running, never what waits.
SELECT w.id, w.host, w.pid, w.hopper_version, w.queues, w.started_at, w.last_seen_at,
       w.stale_after_ms, w.released_at,
       (w.last_seen_at + '1 millisecond'::interval * w.stale_after_ms < now())::boolean AS gone,
       coalesce(held.jobs, 0)::bigint AS jobs_held,
       now()::timestamptz AS read_at
FROM hopper_workers AS w
LEFT JOIN (SELECT j.lease_owner, count(*) AS jobs
           FROM hopper_jobs AS j
           WHERE j.state = 'running'
           GROUP BY j.lease_owner) AS held ON held.lease_owner = w.id
WHERE sqlc.narg(id)::text IS NULL OR w.id = sqlc.narg(id)::text
ORDER BY w.id;

-- name: ReleaseWorkerJobs :many
-- Hands back up to max_jobs running jobs of gone workers, charged like an
-- expired lease: the attempt ran (it may have had effects, or crashed its
-- worker), so it is recorded in the job's errors with reason, and a job
-- on its last attempt moves to hopper_dead_jobs. The rest go back to
-- pending, ready at once in their place in line. Fenced like every release: attempt stays, so the
-- gone worker's ack, nack or extend for it matches nothing.
--
-- Which workers: with worker_id NULL (the sweep every live worker runs),
-- every gone worker not released since its last beat; with worker_id (an
-- operator, or a worker taking over its id at start), that worker if it is
-- gone, or whatever its state when force is set. The workers' rows are
-- locked (SKIP LOCKED: one sweeper per gone worker at a time), so a beat
-- that lands meanwhile waits, and a worker that beat just before is
-- re-checked under the lock and left alone. The sweep takes only the
-- workers whose stale window the sweeping worker has been live for
-- (live_for_ms, as BeatWorker: NULL sets no bound).
--
-- Each row names the job's gone worker (owner), with its host and pid.
--
-- Each worker is marked released once none of its jobs is left running,
-- which its next beat reports as its death, except the row of the worker
-- releasing (holder_started_at: a worker handing back its previous run's
-- jobs at start, under the row it has just written): that worker is live,
-- and nothing of its own run was taken.
WITH gone AS (
    SELECT w.id, w.host, w.pid
    FROM hopper_workers AS w
    WHERE (sqlc.narg(worker_id)::text IS NULL OR w.id = sqlc.narg(worker_id)::text)
      AND (@force::boolean OR w.last_seen_at + '1 millisecond'::interval * w.stale_after_ms < now())
      AND (sqlc.narg(worker_id)::text IS NOT NULL OR w.released_at IS NULL OR w.released_at < w.last_seen_at)
      AND (sqlc.narg(worker_id)::text IS NOT NULL OR sqlc.narg(live_for_ms)::bigint IS NULL
           OR w.stale_after_ms <= sqlc.narg(live_for_ms)::bigint)
    ORDER BY w.id
    LIMIT 100
    FOR UPDATE SKIP LOCKED
), taken AS (
    SELECT j.id, j.queue, j.kind, j.version, j.payload, j.priority, j.attempt, j.max_attempts,
           j.unique_key, j.created_at, j.run_at, j.meta, j.concurrency_key, j.lease_owner,
           j.errors || jsonb_build_array(jsonb_build_object(
               'attempt', j.attempt,
               'at', now(),
               'owner', j.lease_owner,
               'error', @reason::text)) AS errors,
           j.attempt >= j.max_attempts AS exhausted
    FROM hopper_jobs AS j
    WHERE j.state = 'running'
      AND j.lease_owner = ANY (ARRAY(SELECT gone.id FROM gone))
    -- The lease index walks the running jobs only (no index finds an
    -- owner's); an order by id would walk the primary key through every
    -- job. SKIP LOCKED never waits, so no lock order is needed.
    ORDER BY j.lease_until
    LIMIT @max_jobs::integer
    FOR UPDATE OF j SKIP LOCKED
), requeued AS (
    -- run_at stays: a job its worker took from the front of the line goes
    -- back to the front, not behind the backlog that queued up since (the
    -- wake-up moves the claim cursors back to it).
    UPDATE hopper_jobs AS j
    SET state       = 'pending',
        lease_owner = NULL,
        lease_until = NULL,
        errors      = taken.errors
    FROM taken
    WHERE j.id = ANY (ARRAY[taken.id]) AND NOT taken.exhausted
    RETURNING j.id, j.queue, j.priority, j.run_at, taken.lease_owner
), buried AS (
    INSERT INTO hopper_dead_jobs (id, queue, kind, version, payload, priority, attempt,
                                  max_attempts, unique_key, errors, reason, created_at, run_at, meta, concurrency_key)
    SELECT taken.id, taken.queue, taken.kind, taken.version, taken.payload, taken.priority, taken.attempt,
           taken.max_attempts, taken.unique_key, taken.errors, @reason::text || ' on its last attempt', taken.created_at,
           taken.run_at, taken.meta, taken.concurrency_key
    FROM taken
    WHERE taken.exhausted
    RETURNING id, queue
), removed AS (
    -- the ids buried returns: see Sweep (Citus)
    DELETE FROM hopper_jobs AS j
    WHERE j.id = ANY (ARRAY(SELECT buried.id FROM buried))
), marked AS (
    -- Released once nothing of theirs is left running: none beyond this
    -- batch, and none skipped because another transaction held its row (a
    -- dead worker's backend finishing its last statement): the next beat
    -- takes that one, rather than its lease.
    UPDATE hopper_workers AS w
    SET released_at = now()
    WHERE w.id = ANY (ARRAY(SELECT gone.id FROM gone))
      AND w.started_at IS DISTINCT FROM sqlc.narg(holder_started_at)::timestamptz
      AND NOT EXISTS (SELECT FROM hopper_jobs AS j
                      WHERE j.state = 'running'
                        AND j.lease_owner = w.id
                        AND j.id <> ALL (ARRAY(SELECT taken.id FROM taken)))
)
SELECT r.id, r.queue, r.priority, r.run_at, r.dead, r.owner::text AS owner,
       coalesce(g.host, '')::text AS owner_host, coalesce(g.pid, 0)::integer AS owner_pid
FROM (SELECT requeued.id, requeued.queue, requeued.priority, requeued.run_at, false AS dead, requeued.lease_owner AS owner
      FROM requeued
      UNION ALL
      SELECT buried.id, buried.queue, 0::smallint, now(), true AS dead, taken.lease_owner
      FROM buried
      JOIN taken ON taken.id = buried.id) AS r
LEFT JOIN gone AS g ON g.id = r.owner;
