-- The workers running now: each is a row that it writes at start, keeps
-- fresh from its heartbeat (last_seen_at, every beat) and deletes when it
-- stops cleanly. A worker is live while last_seen_at + stale_after_ms is
-- ahead of now(); a row past that is a worker gone without a clean stop
-- (killed, partitioned, or stalled), kept for a while and then pruned by
-- any live worker. The clients read it to say how many live workers serve
-- each queue (ListQueues).
CREATE TABLE hopper_workers (
    -- worker.Config.ID: a restarted worker with a stable ID replaces its row
    id             text        PRIMARY KEY,
    host           text        NOT NULL,
    pid            integer     NOT NULL,
    -- the Hopper module version the worker was built with; '' when unknown
    hopper_version text        NOT NULL DEFAULT '',
    -- the queues it claims from (none for a worker that only fires schedules)
    queues         text[]      NOT NULL,
    started_at     timestamptz NOT NULL DEFAULT now(),
    last_seen_at   timestamptz NOT NULL DEFAULT now(),
    -- how long after last_seen_at the worker is taken to be gone: a few of
    -- its heartbeats, so one late beat does not make it look gone
    stale_after_ms bigint      NOT NULL,

    CONSTRAINT hopper_workers_id_check CHECK (char_length(id) >= 1),
    CONSTRAINT hopper_workers_stale_after_check CHECK (stale_after_ms > 0)
);
