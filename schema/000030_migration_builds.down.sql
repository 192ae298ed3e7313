-- The record of which build applied each migration goes with its table:
-- a Hopper migrator before migration 30 neither reads nor writes it.
DROP TABLE IF EXISTS hopper_migration_builds;
