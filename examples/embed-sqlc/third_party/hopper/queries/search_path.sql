-- name: EnterSchema :exec
-- Points the rest of this transaction at Hopper's schema, for deployments
-- that cannot set search_path on the connection (PgBouncer in transaction
-- mode refuses it as a startup parameter, and a session SET would reach
-- whichever client the server connection serves next). The setting is
-- local: it ends with the transaction, or with the implicit transaction of
-- a pipeline that runs this and one statement. The search_path it replaces
-- is kept in hopper.outer_search_path for LeaveSchema; the subquery runs
-- first, so the saved value is the caller's. @search_path is a quoted
-- identifier list, e.g. "jobs".
SELECT set_config('search_path', @search_path::text, true)
FROM (SELECT set_config('hopper.outer_search_path', current_setting('search_path'), true)) AS saved;

-- name: LeaveSchema :exec
-- Gives the caller's transaction back the search_path EnterSchema replaced,
-- so that the caller's own statements after Hopper's resolve as before.
SELECT set_config('search_path', current_setting('hopper.outer_search_path'), true);

-- name: LocateHopper :one
-- Where the session's search_path leads: its first existing schema, the
-- search_path itself (for the error that says none exists), and the schema
-- holding the hopper_jobs the search_path resolves to; '' when there is no
-- such schema, or no Hopper tables there. The CLI reads it before a command so that an unmigrated
-- schema is named as such rather than as a missing relation.
SELECT coalesce(current_schema()::text, '')::text AS current_schema,
       current_setting('search_path') AS search_path,
       coalesce((SELECT n.nspname::text
                   FROM pg_catalog.pg_class AS c
                   JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
                  WHERE c.oid = to_regclass('hopper_jobs')), '')::text AS hopper_schema;
