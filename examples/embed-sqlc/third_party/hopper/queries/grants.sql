-- name: MissingGrants :many
-- The privileges of a list that this session's role lacks on the objects
-- of schema schema_name: the list is three arrays of one length (kinds,
-- objects, privileges, one privilege a row), built by internal/grants
-- from its table of what each kind of role needs, so that the one check
-- follows the one table that hopper grants prints. A kind is 'schema'
-- (the schema itself; object unused), 'table' (a table or a view),
-- 'sequence', 'function' (every function of that name) or 'functions'
-- (every function of the schema but those named in except_functions,
-- which the list grants or revokes by name; a missing one comes back
-- with its name), with the role checked (current_user). Objects the schema does not hold are not reported:
-- the version checks name the migration that adds them. The functions
-- has_*_privilege count the role's memberships and PUBLIC's grants, as
-- the statements the role runs will.
WITH wanted AS (
    SELECT unnest(@kinds::text[]) AS kind, unnest(@objects::text[]) AS object, unnest(@privileges::text[]) AS privilege
), ns AS (
    SELECT n.oid FROM pg_catalog.pg_namespace AS n WHERE n.nspname = @schema_name::text
)
SELECT DISTINCT m.kind::text AS kind, m.object::text AS object, m.privilege::text AS privilege, current_user::text AS role_name
FROM (
    SELECT w.kind, w.object, w.privilege
    FROM wanted AS w, ns
    WHERE w.kind = 'schema' AND NOT has_schema_privilege(ns.oid, w.privilege)
    UNION ALL
    SELECT w.kind, w.object, w.privilege
    FROM wanted AS w, ns
    JOIN pg_catalog.pg_class AS c ON c.relnamespace = ns.oid
    WHERE w.kind = 'table' AND c.relname = w.object AND NOT has_table_privilege(c.oid, w.privilege)
    UNION ALL
    SELECT w.kind, w.object, w.privilege
    FROM wanted AS w, ns
    JOIN pg_catalog.pg_class AS c ON c.relnamespace = ns.oid
    WHERE w.kind = 'sequence' AND c.relname = w.object AND c.relkind = 'S' AND NOT has_sequence_privilege(c.oid, w.privilege)
    UNION ALL
    SELECT w.kind, w.object, w.privilege
    FROM wanted AS w, ns
    JOIN pg_catalog.pg_proc AS p ON p.pronamespace = ns.oid
    WHERE w.kind = 'function' AND p.proname = w.object AND NOT has_function_privilege(p.oid, w.privilege)
    UNION ALL
    SELECT w.kind, p.proname, w.privilege
    FROM wanted AS w, ns
    JOIN pg_catalog.pg_proc AS p ON p.pronamespace = ns.oid
    WHERE w.kind = 'functions' AND p.proname <> ALL (@except_functions::text[]) AND NOT has_function_privilege(p.oid, w.privilege)
) AS m
ORDER BY 1, 2, 3;
