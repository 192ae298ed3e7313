-- Operating the queue: queue control, cancelled jobs, finished-job history.

-- Batches choose their ids before COPY (ReserveJobIDs): an id of 0 or
-- below can only be a mistake (a zero-valued parameter), and is refused.
ALTER TABLE hopper_jobs ADD CONSTRAINT hopper_jobs_id_check CHECK (id > 0);

-- One row per queue that a worker has served or an operator has paused.
-- Dequeue reads paused_at in the claim itself, so a pause holds for every
-- worker process from the moment it commits, and a restarted worker
-- respects it without being told.
CREATE TABLE hopper_queues (
    name       text        PRIMARY KEY,
    -- NULL: claims take its jobs; set: no claim does until it is resumed
    paused_at  timestamptz,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),

    CONSTRAINT hopper_queues_name_check CHECK (char_length(name) BETWEEN 1 AND 128)
);

-- A job cancelled by an operator (pending, scheduled or running) or by its
-- own handler is kept with the dead ones, as cancelled: never dropped
-- without a trace, retried like a dead job, purged with them.
-- run_at is when the job was last due (rows from before this migration
-- get the time it ran).
ALTER TABLE hopper_dead_jobs
    ADD COLUMN state text NOT NULL DEFAULT 'dead',
    ADD COLUMN run_at timestamptz NOT NULL DEFAULT now(),
    ADD CONSTRAINT hopper_dead_jobs_state_check CHECK (state IN ('dead', 'cancelled'));

-- Completed jobs of the kinds and queues that keep them (opt-in, off by
-- default), written by the same statement that acknowledges them and kept
-- until keep_until; every worker prunes expired rows in bounded batches.
-- result is what the handler returned, as JSON (NULL: none).
CREATE TABLE hopper_job_history (
    id           bigint      PRIMARY KEY,
    queue        text        NOT NULL,
    kind         text        NOT NULL,
    version      integer     NOT NULL,
    payload      jsonb       NOT NULL,
    priority     smallint    NOT NULL,
    attempt      integer     NOT NULL,
    max_attempts integer     NOT NULL,
    unique_key   text,
    errors       jsonb       NOT NULL,
    run_at       timestamptz NOT NULL,
    result       jsonb,
    created_at   timestamptz NOT NULL,
    finished_at  timestamptz NOT NULL DEFAULT now(),
    keep_until   timestamptz NOT NULL
) WITH (
    -- Every row is inserted once and deleted once, when it expires.
    autovacuum_vacuum_scale_factor = 0.05,
    autovacuum_vacuum_insert_scale_factor = 0.05
);

-- Expired rows, in the order the prune removes them. (Lists read the
-- table newest first through its primary key: no index on kind or queue,
-- whose upkeep every kept job would pay.)
CREATE INDEX hopper_job_history_keep_until_idx ON hopper_job_history (keep_until);
-- Finding a completed job by its unique key (jobs without one cost nothing).
CREATE INDEX hopper_job_history_unique_key_idx ON hopper_job_history (unique_key)
    WHERE unique_key IS NOT NULL;
CREATE INDEX hopper_dead_jobs_unique_key_idx ON hopper_dead_jobs (unique_key)
    WHERE unique_key IS NOT NULL;

-- Every job Hopper knows of, live or finished, in one shape: what the
-- operations API, the CLI and the dashboard read. A query on it with a
-- filter and ORDER BY id DESC LIMIT n runs as one index scan per table,
-- merged (PostgreSQL pushes the conditions into each branch), and a branch
-- whose state the filter excludes is not scanned at all. Ids are unique
-- across the three tables: a job keeps its id from enqueue to the end.
CREATE VIEW hopper_all_jobs AS
SELECT j.id, j.queue, j.kind, j.version, j.payload, j.state, j.priority, j.run_at,
       j.attempt, j.max_attempts, j.lease_owner, j.lease_until, j.unique_key, j.errors,
       j.created_at, NULL::timestamptz AS finished_at, NULL::text AS reason, NULL::jsonb AS result
FROM hopper_jobs AS j
UNION ALL
SELECT d.id, d.queue, d.kind, d.version, d.payload, d.state, d.priority, d.run_at,
       d.attempt, d.max_attempts, NULL::text, NULL::timestamptz, d.unique_key, d.errors,
       d.created_at, d.died_at, d.reason, NULL::jsonb
FROM hopper_dead_jobs AS d
UNION ALL
SELECT h.id, h.queue, h.kind, h.version, h.payload, 'completed'::text, h.priority, h.run_at,
       h.attempt, h.max_attempts, NULL::text, NULL::timestamptz, h.unique_key, h.errors,
       h.created_at, h.finished_at, NULL::text, h.result
FROM hopper_job_history AS h;
