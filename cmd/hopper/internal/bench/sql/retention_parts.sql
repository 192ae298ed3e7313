-- The retention mode's partitions: an hour wide, from the current hour to
-- 24 hours ahead (hopper_history_partitions_ensure), and one for the hour
-- before, made as the function makes them. Its range has passed: the next
-- call of hopper_history_partitions_drop drops it.
DO $$
BEGIN
    PERFORM hopper_history_partitions_ensure('1 hour', '24 hours');
    CREATE TABLE hopper_job_history_bench_passed (LIKE hopper_job_history INCLUDING DEFAULTS);
    ALTER TABLE hopper_job_history_bench_passed ADD PRIMARY KEY (id);
    EXECUTE format('ALTER TABLE hopper_job_history ATTACH PARTITION hopper_job_history_bench_passed FOR VALUES FROM (%L) TO (%L)',
                   to_timestamp(floor(extract(epoch FROM now()) / 3600) * 3600) - interval '1 hour', to_timestamp(floor(extract(epoch FROM now()) / 3600) * 3600));
    INSERT INTO hopper_history_partitions (name, lower_at, upper_at)
    VALUES ('hopper_job_history_bench_passed', to_timestamp(floor(extract(epoch FROM now()) / 3600) * 3600) - interval '1 hour', to_timestamp(floor(extract(epoch FROM now()) / 3600) * 3600));
END;
$$;
