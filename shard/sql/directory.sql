-- The directory of a sharded Hopper on a Citus coordinator (package shard):
-- which schemas are its shards, and how many there are. shard.Create runs
-- these statements, each idempotent, in one transaction after
-- DirectorySettings; sqlc reads them as the directory's schema too.

-- name: DirectorySettings :exec
-- The settings of the directory's transaction, local to it: the directory
-- schema is a plain schema of the coordinator, never a distributed one,
-- whatever the database's default for schema-based sharding.
SELECT set_config('citus.enable_schema_based_sharding', 'off', true);

-- name: CreateDirectorySchema :exec
CREATE SCHEMA IF NOT EXISTS hopper_directory;

-- name: CreateDirectoryTable :exec
-- One row per shard: its position k (0 to shard_count - 1, the value of
-- id mod shard_count for its jobs' ids), its schema, and the count, the
-- same on every row.
CREATE TABLE IF NOT EXISTS hopper_directory.hopper_shards (
    position    integer     PRIMARY KEY CHECK (position >= 0),
    name        text        NOT NULL UNIQUE CHECK (char_length(name) BETWEEN 1 AND 63),
    shard_count integer     NOT NULL CHECK (shard_count >= 1 AND position < shard_count),
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- name: CreateShardOfFunction :exec
-- The position of a routing key's shard among shard_count: the first four
-- bytes of the key's MD5 as a big-endian unsigned integer, modulo the
-- count. Package shard computes the same in Go (shard.Position), so that
-- jobs enqueued by SQL and by Go with one key meet in one shard.
CREATE OR REPLACE FUNCTION hopper_directory.hopper_shard_position(key text, shard_count integer)
RETURNS integer
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
    SELECT (('x' || substr(md5(key), 1, 8))::bit(32)::bigint % shard_count)::integer
$$;

-- name: CreateShardForFunction :exec
-- The schema of a routing key's shard, read from the directory: what the
-- SQL API calls before enqueueing into a shard (SET LOCAL search_path to
-- it, or qualify hopper_enqueue with it).
CREATE OR REPLACE FUNCTION hopper_directory.hopper_shard_for(key text)
RETURNS text
LANGUAGE sql STABLE STRICT
AS $$
    SELECT s.name
    FROM hopper_directory.hopper_shards AS s
    WHERE s.position = hopper_directory.hopper_shard_position(key, s.shard_count)
$$;

-- name: CreateShardSchemaFunction :exec
-- Creates a shard's schema as a distributed schema (schema-based
-- sharding, for this transaction only) unless it exists; exists says
-- whether it did. A schema's name can only go into DDL as an identifier,
-- which format's %I quotes.
CREATE OR REPLACE FUNCTION hopper_directory.hopper_create_shard_schema(shard text)
RETURNS boolean
LANGUAGE plpgsql
AS $$
BEGIN
    IF to_regnamespace(quote_ident(shard)) IS NOT NULL THEN
        RETURN true;
    END IF;
    PERFORM set_config('citus.enable_schema_based_sharding', 'on', true);
    EXECUTE format('CREATE SCHEMA %I', shard);
    PERFORM set_config('citus.enable_schema_based_sharding', 'off', true);
    RETURN false;
END;
$$;

-- name: CreatePrepareShardFunction :exec
-- Makes a migrated shard a member of the set, each step idempotent:
--   - the id sequence hands out position, position + shard_count, … (for
--     position 0: shard_count, 2 × shard_count, …, ids being positive),
--     so that id mod shard_count names the shard. Citus refuses ALTER
--     SEQUENCE on a distributed sequence ("Altering a distributed sequence
--     is currently not supported"), so it is altered on the coordinator
--     only (DDL propagation off for the statement): inserts through the
--     coordinator take their ids there, the nodes' copies go unused. A
--     sequence already stepping by shard_count from the right residue is
--     left as it is; otherwise it restarts at the first id of the shard
--     above every id it handed out.
--   - the shard is made silent: its hopper_silent() returns true (Citus
--     propagates the function to the shard's node), so that none of its
--     functions (triggers, sequences, workflows, durable jobs) sends
--     NOTIFY on the node, since PostgreSQL refuses to PREPARE a
--     transaction that sent NOTIFY, and Citus commits a transaction that
--     wrote to two nodes (or sent intermediate results to them) in two
--     phases. The Set and the sharded worker wake workers from the
--     coordinator instead (migration 34, shard_wakes).
--   - the insert trigger is disabled too (on the node's table as well:
--     Citus passes DISABLE TRIGGER on, with unsafe triggers allowed): it
--     would only build payloads the switch then drops, on every insert.
CREATE OR REPLACE FUNCTION hopper_directory.hopper_prepare_shard(shard text, shard_position integer, shard_count integer)
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    seq      regclass := pg_get_serial_sequence(format('%I.hopper_jobs', shard), 'id')::regclass;
    step     bigint;
    first_id bigint;
    last_id  bigint;
    next_id  bigint;
BEGIN
    SELECT s.seqincrement, s.seqstart INTO step, first_id FROM pg_catalog.pg_sequence AS s WHERE s.seqrelid = seq;
    IF step IS DISTINCT FROM shard_count OR first_id % shard_count <> shard_position THEN
        SELECT s.last_value INTO last_id FROM pg_catalog.pg_sequences AS s
        WHERE s.schemaname = shard AND s.sequencename = (SELECT c.relname FROM pg_catalog.pg_class AS c WHERE c.oid = seq);
        next_id := coalesce(last_id, 0) + 1;
        next_id := next_id + ((shard_position - next_id % shard_count) + shard_count) % shard_count;
        IF next_id < 1 THEN
            next_id := next_id + shard_count;
        END IF;
        PERFORM set_config('citus.enable_ddl_propagation', 'off', true);
        EXECUTE format('ALTER SEQUENCE %s INCREMENT BY %s START %s RESTART %s', seq, shard_count, next_id, next_id);
        PERFORM set_config('citus.enable_ddl_propagation', 'on', true);
    END IF;
    EXECUTE format('CREATE OR REPLACE FUNCTION %I.hopper_silent() RETURNS boolean
                    LANGUAGE sql STABLE PARALLEL SAFE AS $silent$ SELECT true $silent$', shard);
    PERFORM set_config('citus.enable_unsafe_triggers', 'on', true);
    EXECUTE format('ALTER TABLE %I.hopper_jobs DISABLE TRIGGER hopper_jobs_notify_enqueued', shard);
END;
$$;

-- name: CreateShardDistributedFunction :exec
-- Whether a schema is a distributed schema of Citus (schema-based
-- sharding): its tables live whole on one node. PL/pgSQL, so that the
-- statement naming Citus's catalog is planned where Citus is installed.
CREATE OR REPLACE FUNCTION hopper_directory.hopper_shard_distributed(shard text)
RETURNS boolean
LANGUAGE plpgsql STABLE STRICT
AS $$
BEGIN
    RETURN EXISTS (SELECT FROM pg_catalog.pg_dist_schema AS d WHERE d.schemaid = to_regnamespace(quote_ident(shard)));
END;
$$;

-- name: CreateShardNodeFunction :exec
-- The node holding a shard (the placement of its hopper_jobs, from
-- Citus's citus_shards): '' and 0 when Citus does not place it.
CREATE OR REPLACE FUNCTION hopper_directory.hopper_shard_node(shard text, OUT node_name text, OUT node_port integer)
LANGUAGE plpgsql STABLE STRICT
AS $$
BEGIN
    SELECT c.nodename::text, c.nodeport::integer INTO node_name, node_port
    FROM citus_shards AS c
    WHERE c.table_name = to_regclass(format('%I.hopper_jobs', shard))
    LIMIT 1;
    node_name := coalesce(node_name, '');
    node_port := coalesce(node_port, 0);
END;
$$;

-- name: CreateShardVersionFunction :exec
-- A shard's migration version and whether it is dirty, as the migrator
-- records it (0 and false when it has not been migrated).
CREATE OR REPLACE FUNCTION hopper_directory.hopper_shard_version(shard text, OUT version bigint, OUT dirty boolean)
LANGUAGE plpgsql STABLE STRICT
AS $$
BEGIN
    version := 0;
    dirty := false;
    IF to_regclass(format('%I.hopper_schema_migrations', shard)) IS NOT NULL THEN
        EXECUTE format('SELECT m.version, m.dirty FROM %I.hopper_schema_migrations AS m LIMIT 1', shard) INTO version, dirty;
    END IF;
    version := coalesce(version, 0);
    dirty := coalesce(dirty, false);
END;
$$;
