-- The job table's state at the end of a run: dead and live tuples as the
-- statistics collector last saw them, sizes, and vacuums so far.
SELECT coalesce(s.n_dead_tup, 0)::bigint        AS dead_tuples,
       coalesce(s.n_live_tup, 0)::bigint        AS live_tuples,
       pg_table_size('hopper_jobs')::bigint     AS table_bytes,
       pg_indexes_size('hopper_jobs')::bigint   AS index_bytes,
       pg_relation_size('hopper_jobs_ready_idx')::bigint AS ready_index_bytes,
       coalesce(s.autovacuum_count, 0)::bigint  AS autovacuums,
       coalesce(s.vacuum_count, 0)::bigint      AS vacuums
FROM pg_stat_user_tables AS s
WHERE s.relid = 'hopper_jobs'::regclass;
