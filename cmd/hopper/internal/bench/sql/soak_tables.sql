-- The soak's sample of each table named in $1: its size (heap with its
-- TOAST, and its indexes), live and dead tuples as the statistics collector
-- last saw them, and the autovacuums run on it so far. A partitioned table
-- is the sum of its partitions (pg_partition_tree lists nothing for a plain
-- table, which is then its own one partition). The tables are read in the
-- caller's search_path.
SELECT t.name,
       coalesce(sum(pg_table_size(p.relid)), 0)::bigint   AS table_bytes,
       coalesce(sum(pg_indexes_size(p.relid)), 0)::bigint AS index_bytes,
       coalesce(sum(s.n_live_tup), 0)::bigint             AS live_tuples,
       coalesce(sum(s.n_dead_tup), 0)::bigint             AS dead_tuples,
       coalesce(sum(s.autovacuum_count), 0)::bigint       AS autovacuums,
       count(*) FILTER (WHERE p.isleaf)::int             AS partitions
FROM unnest($1::text[]) WITH ORDINALITY AS t(name, ord)
JOIN pg_class AS c ON c.oid = t.name::regclass
CROSS JOIN LATERAL (
    SELECT tree.relid, tree.isleaf FROM pg_partition_tree(c.oid) AS tree WHERE c.relkind = 'p'
    UNION ALL
    SELECT c.oid, true WHERE c.relkind <> 'p'
) AS p
LEFT JOIN pg_stat_user_tables AS s ON s.relid = p.relid
GROUP BY t.name, t.ord
ORDER BY t.ord;
