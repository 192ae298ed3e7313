-- Undoes 000032: the rate claims' log back to the default replica
-- identity, its primary key, which it has none of (no identity), as
-- migration 6 made it. Citus then refuses to move the schema online
-- again, and a publication that includes the table makes the server
-- refuse the log's updates and deletes, so rate-limited claims fail.
ALTER TABLE hopper_rate_claims REPLICA IDENTITY DEFAULT;
