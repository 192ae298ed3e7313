-- The raw-SQL baseline: the least a SKIP LOCKED queue can do per job, on a
-- table shaped like hopper_jobs' hot part.
CREATE TABLE bench_baseline (
    id      bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue   text   NOT NULL DEFAULT 'default',
    state   text   NOT NULL DEFAULT 'pending',
    owner   text,
    payload jsonb  NOT NULL
);
CREATE INDEX bench_baseline_ready_idx ON bench_baseline (queue, id) WHERE state = 'pending';
CREATE INDEX bench_baseline_owner_idx ON bench_baseline (owner) WHERE state = 'running';
