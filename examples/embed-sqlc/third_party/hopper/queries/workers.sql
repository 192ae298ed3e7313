-- name: RegisterWorker :one
-- Records a running worker at its start: a worker restarted under the same
-- id (a stable worker.Config.ID) replaces its previous row. started_at is
-- now, or the given one when a worker writes its row again after losing it
-- (pruned while it could not reach the database, or removed by another
-- worker with its id); the worker keeps it to remove its own row only.
INSERT INTO hopper_workers (id, host, pid, hopper_version, queues, stale_after_ms, started_at, last_seen_at)
VALUES (@id::text, @host::text, @pid::integer, @hopper_version::text, @queues::text[], @stale_after_ms::bigint,
        coalesce(sqlc.narg(started_at)::timestamptz, now()), now())
ON CONFLICT (id) DO UPDATE
SET host           = excluded.host,
    pid            = excluded.pid,
    hopper_version = excluded.hopper_version,
    queues         = excluded.queues,
    stale_after_ms = excluded.stale_after_ms,
    started_at     = excluded.started_at,
    last_seen_at   = now()
RETURNING started_at;

-- name: BeatWorker :execrows
-- Says the worker is still running: its heartbeat runs it on every beat.
-- One row, by primary key. 0 rows: the worker's row is gone (pruned while
-- the worker could not reach the database for long, or removed at the
-- clean stop of another worker with its id), and the worker writes it
-- again (RegisterWorker).
UPDATE hopper_workers
SET last_seen_at = now()
WHERE id = @id::text;

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
