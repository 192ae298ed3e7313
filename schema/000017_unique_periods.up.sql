-- A unique key held for a period (jobs.UniquePeriod) after its job
-- completed, whether or not the history keeps completed jobs: without
-- history a completed job leaves no row, and the key was free again at
-- once ("sync this account at most once an hour" synced twice).
--
-- An enqueue with a period writes, beside the job it inserts, a compact
-- record of the key: the job's id, kind and enqueue time, and when the
-- record stops mattering (enqueue time + the period). A later enqueue of
-- the key reads it as a completed holder when the job is neither live nor
-- dead (nor kept in the history, which answers for itself). Workers delete
-- expired records as they prune the history.
--
-- Guarded by: jobs/TestUniquePeriodWithoutHistory, tests/TestLeastPrivilege (its
-- grant).
CREATE TABLE hopper_unique_periods (
    unique_key text        PRIMARY KEY,
    job_id     bigint      NOT NULL,
    kind       text        NOT NULL,
    created_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL
);
CREATE INDEX hopper_unique_periods_expires_idx ON hopper_unique_periods (expires_at);
