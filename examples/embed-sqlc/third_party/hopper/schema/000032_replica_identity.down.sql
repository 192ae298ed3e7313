-- Undoes 000032: the rate claims' log back to the default replica
-- identity (its primary key, which it has none of: no identity), as
-- migration 6 made it. A schema at 31 cannot be moved online by Citus
-- again; a logical replica stops carrying the log's updates and deletes.
ALTER TABLE hopper_rate_claims REPLICA IDENTITY DEFAULT;
