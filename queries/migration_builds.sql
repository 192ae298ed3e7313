-- Which build applied each migration (hopper_migration_builds, migration
-- 30): written by schema's migrator at the end of each run, on the session
-- that holds its run lock; read by hopper migrate version.

-- name: RecordMigrationBuilds :exec
-- Records the build that applied versions (the migrations a run applied),
-- and forgets the migrations above to_version (the version the run left:
-- what a down undid), in one statement. A migration applied again gets
-- the newer build (after a force, its old row is still there).
WITH forgotten AS (
    DELETE FROM hopper_migration_builds WHERE version > @to_version::bigint
)
INSERT INTO hopper_migration_builds AS b (version, hopper_version, program, revision, vcs_modified, vcs_time, go_version)
SELECT v, @hopper_version::text, @program::text, @revision::text, @vcs_modified::boolean,
       sqlc.narg(vcs_time)::timestamptz, @go_version::text
FROM unnest(@versions::bigint[]) AS v
WHERE v <= @to_version::bigint
ON CONFLICT (version) DO UPDATE SET
    hopper_version = excluded.hopper_version,
    program        = excluded.program,
    revision       = excluded.revision,
    vcs_modified   = excluded.vcs_modified,
    vcs_time       = excluded.vcs_time,
    go_version     = excluded.go_version,
    applied_by     = excluded.applied_by,
    applied_at     = excluded.applied_at;

-- name: ListMigrationBuilds :many
-- The recorded builds, oldest migration first.
SELECT version, hopper_version, program, revision, vcs_modified, vcs_time, go_version, applied_by, applied_at
FROM hopper_migration_builds
ORDER BY version;
