-- The claim statement's totals in pg_stat_statements (when it is loaded):
-- calls, rows claimed, and shared buffers touched (hit or read). Deltas
-- between two readings give buffers per claimed job in that window.
SELECT coalesce(sum(calls), 0)::bigint,
       coalesce(sum(rows), 0)::bigint,
       coalesce(sum(shared_blks_hit + shared_blks_read), 0)::bigint
FROM public.pg_stat_statements
WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND query LIKE '-- name: Dequeue %';
