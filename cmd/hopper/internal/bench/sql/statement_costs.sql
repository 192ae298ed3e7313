-- Hopper's statements in pg_stat_statements (when it is loaded), by the
-- sqlc name their text starts with: calls, execution time and shared
-- buffers touched. Deltas between two readings give a run's costs.
SELECT substring(s.query FROM '^-- name: (\w+)') AS name,
       sum(s.calls)::bigint,
       sum(s.total_exec_time)::float8,
       sum(s.shared_blks_hit + s.shared_blks_read)::bigint
FROM public.pg_stat_statements AS s
WHERE s.dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND s.query LIKE '-- name: %'
GROUP BY 1;
