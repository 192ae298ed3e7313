-- Which build applied each migration (issue 62).
--
-- A rollout could not tell which program had migrated the schema: the
-- hopper CLI of a migration Job and the library in the application are
-- two builds, and nothing tied the one that migrated to the one that
-- runs. Each Hopper migrator from this one on writes a row per migration
-- it applied, once its run ends (under its run lock, on the session that
-- holds it): Hopper's module version, the program, the commit it was
-- built from, and the role that ran it. A migration it undoes loses its
-- row. Migrations applied before this one, or by a Hopper release before
-- it, have no row: the table says nothing rather than guess.
--
-- A new table, which nothing else reads: the migration takes no lock on
-- a table the queue uses. The application's role needs no grant on it
-- (the migrator writes it with the owner's rights; hopper migrate
-- version reads it).
--
-- Guarded by: schema/TestMigrationBuildsRecorded,
-- schema/TestMigrationBuildsFollowDown, tests/TestCLIMigrateBuilds.
CREATE TABLE hopper_migration_builds (
    -- the migration's version (hopper_schema_migrations.version)
    version        bigint      PRIMARY KEY,
    -- the Hopper module version of the build that applied it, as
    -- hopper version prints it ("v1.2.0", "devel unstamped")
    hopper_version text        NOT NULL,
    -- the main package of the program that applied it
    -- ("github.com/hopperq/hopper/cmd/hopper" for the CLI)
    program        text        NOT NULL,
    -- the commit that program was built from (vcs.revision), '' when the
    -- build recorded none; vcs_modified: its checkout had uncommitted
    -- changes; vcs_time: the commit's time, NULL when unknown
    revision       text        NOT NULL,
    vcs_modified   boolean     NOT NULL,
    vcs_time       timestamptz,
    go_version     text        NOT NULL,
    -- the role that ran the migration
    applied_by     text        NOT NULL DEFAULT current_user,
    applied_at     timestamptz NOT NULL DEFAULT now(),

    CONSTRAINT hopper_migration_builds_version_check CHECK (version > 0)
);
