-- Rows inserted and rows still in the table. Inserted is the identity's
-- last value, not max(id): max(id) misses claimed and deleted rows, and
-- reads 0 once the claimers have emptied the table. The produce script
-- inserts in single autocommitted statements, so no identity value is lost
-- to a rollback (runBaseline checks the figure against pgbench's count).
SELECT coalesce(pg_sequence_last_value(pg_get_serial_sequence('bench_baseline', 'id')), 0) AS inserted,
       (SELECT count(*) FROM bench_baseline) AS remaining;
