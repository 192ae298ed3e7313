-- The history's size (every partition, indexes included) and its dead
-- tuples, after the statistics of this backend's own work are flushed.
SELECT coalesce(sum(pg_total_relation_size(t.relid)), 0)::bigint AS bytes,
       coalesce(sum(s.n_dead_tup), 0)::bigint AS dead_tuples
FROM pg_partition_tree('hopper_job_history') AS t
LEFT JOIN pg_stat_user_tables AS s ON s.relid = t.relid
WHERE t.isleaf;
