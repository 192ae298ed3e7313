-- Hopper's tables. Names are unqualified so that the connection's search_path
-- decides which schema they live in.

-- Live jobs only: pending (ready to run), scheduled (run_at in the future:
-- delayed, or waiting to retry) and running (leased). A completed job is
-- deleted; a job out of attempts moves to hopper_dead_jobs. Keeping this
-- table small is what keeps FOR UPDATE SKIP LOCKED fast. Scheduled jobs are
-- kept out of the ready index, so a million jobs due next year cost a
-- dequeue nothing; workers promote them to pending when they fall due.
CREATE TABLE hopper_jobs (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue        text        NOT NULL,
    kind         text        NOT NULL,
    -- payload version: the kind's version when the job was enqueued
    version      integer     NOT NULL DEFAULT 1,
    payload      jsonb       NOT NULL,
    state        text        NOT NULL DEFAULT 'pending',
    -- 0 runs first, 9 last
    priority     smallint    NOT NULL DEFAULT 0,
    run_at       timestamptz NOT NULL DEFAULT now(),
    -- incremented at every claim, never decremented: (id, attempt) names one
    -- claim, which is what ack, nack and extend are fenced by
    attempt      integer     NOT NULL DEFAULT 0,
    max_attempts integer     NOT NULL DEFAULT 25,
    lease_owner  text,
    lease_until  timestamptz,
    unique_key   text,
    -- one entry per failed attempt: {attempt, at, owner, error}
    errors       jsonb       NOT NULL DEFAULT '[]',
    created_at   timestamptz NOT NULL DEFAULT now(),

    CONSTRAINT hopper_jobs_state_check CHECK (state IN ('pending', 'scheduled', 'running')),
    CONSTRAINT hopper_jobs_queue_check CHECK (char_length(queue) BETWEEN 1 AND 128),
    CONSTRAINT hopper_jobs_kind_check CHECK (char_length(kind) BETWEEN 1 AND 128),
    CONSTRAINT hopper_jobs_version_check CHECK (version >= 1),
    CONSTRAINT hopper_jobs_priority_check CHECK (priority BETWEEN 0 AND 9),
    CONSTRAINT hopper_jobs_max_attempts_check CHECK (max_attempts >= 1),
    CONSTRAINT hopper_jobs_unique_key_check CHECK (char_length(unique_key) BETWEEN 1 AND 512),
    CONSTRAINT hopper_jobs_lease_check CHECK (
        (state = 'running') = (lease_owner IS NOT NULL AND lease_until IS NOT NULL)
    )
) WITH (
    -- A churn table: every job is inserted, updated at least once and
    -- deleted. Vacuum early and often so dead tuples never pile up in front
    -- of the dequeue index scan.
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0.01,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 0,
    fillfactor = 90
);

-- Ready work, in the order dequeue takes it.
CREATE INDEX hopper_jobs_ready_idx ON hopper_jobs (queue, priority, run_at, id)
    WHERE state = 'pending';

-- Scheduled jobs, in the order they fall due (promotion).
CREATE INDEX hopper_jobs_scheduled_idx ON hopper_jobs (run_at)
    WHERE state = 'scheduled';

-- Leases, in the order the sweep reclaims them.
CREATE INDEX hopper_jobs_lease_idx ON hopper_jobs (lease_until)
    WHERE state = 'running';

-- At most one live job per unique key. Finished and dead jobs free the key.
CREATE UNIQUE INDEX hopper_jobs_unique_key_idx ON hopper_jobs (unique_key)
    WHERE unique_key IS NOT NULL;

-- Jobs that ran out of attempts, failed permanently, or could not be decoded.
-- They keep their id, payload and full error history for triage.
CREATE TABLE hopper_dead_jobs (
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
    reason       text        NOT NULL,
    created_at   timestamptz NOT NULL,
    died_at      timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX hopper_dead_jobs_died_at_idx ON hopper_dead_jobs (died_at);
CREATE INDEX hopper_dead_jobs_kind_idx ON hopper_dead_jobs (kind, queue);

-- One wake-up per inserting statement and queue, so a COPY of 100,000 jobs
-- sends one notification, and jobs inserted by an application's own SQL wake
-- workers too. Scheduled jobs are found by polling instead. The payload names
-- the schema, so deployments sharing a database ignore each other's wake-ups.
CREATE FUNCTION hopper_notify_enqueued() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('hopper_jobs', json_build_object('schema', TG_TABLE_SCHEMA, 'queue', ready.queue)::text)
    FROM (SELECT DISTINCT queue FROM hopper_new_jobs WHERE run_at <= now()) AS ready;
    RETURN NULL;
END;
$$;

CREATE TRIGGER hopper_jobs_notify_enqueued
    AFTER INSERT ON hopper_jobs
    REFERENCING NEW TABLE AS hopper_new_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION hopper_notify_enqueued();
