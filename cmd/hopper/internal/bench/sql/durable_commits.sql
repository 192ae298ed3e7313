-- Transactions committed in this database, by every session: the durable
-- mode's count of a call's cost when pg_stat_statements is not loaded. A
-- backend reports its counts when it exits, at the latest, so the mode
-- reads this once the worker's connections are gone (durable_backends.sql).
SELECT coalesce(xact_commit, 0)::bigint FROM pg_stat_database WHERE datname = current_database();
