-- The durable mode's scratch table: what a transactional step writes, and
-- what the same write in a plain transaction writes, one row a call. A
-- benchmark's scratch schema only.
CREATE TABLE hopper_bench_durable_rows (
    id     bigint  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id bigint  NOT NULL,
    call   integer NOT NULL
);
