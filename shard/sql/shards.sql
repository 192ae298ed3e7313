-- name: ListShards :many
-- The directory's shards, in position order.
SELECT s.position, s.name, s.shard_count
FROM hopper_directory.hopper_shards AS s
ORDER BY s.position;

-- name: DirectoryExists :one
-- Whether this database has a directory (shard.Open's first question).
SELECT (to_regclass('hopper_directory.hopper_shards') IS NOT NULL)::boolean AS exists;

-- name: RecordShard :exec
-- Records a shard prepared by PrepareShard; a shard recorded already keeps
-- its row.
INSERT INTO hopper_directory.hopper_shards (position, name, shard_count)
VALUES (@position::integer, @name::text, @shard_count::integer)
ON CONFLICT (position) DO NOTHING;

-- name: CreateShardSchema :one
-- Creates the shard's schema as a distributed schema unless it exists
-- (existed: it did).
SELECT hopper_directory.hopper_create_shard_schema(@name::text)::boolean AS existed;

-- name: PrepareShard :exec
SELECT hopper_directory.hopper_prepare_shard(@name::text, @position::integer, @shard_count::integer);

-- name: ShardIsDistributed :one
-- Whether the schema is a distributed schema of Citus (schema-based
-- sharding): its tables live whole on one node.
SELECT hopper_directory.hopper_shard_distributed(@name::text)::boolean AS distributed;

-- name: ShardPosition :one
-- The SQL side of shard.Position, for the test that both agree.
SELECT hopper_directory.hopper_shard_position(@key::text, @shard_count::integer)::integer AS position;

-- name: ShardFor :one
SELECT coalesce(hopper_directory.hopper_shard_for(@key::text), '')::text AS name;

-- name: NotifyShards :exec
-- Wakes the workers of the shards and queues a sharded enqueue wrote to:
-- one notification per payload ({"schema", "queue"}, as the worker's
-- notifier reads them), sent on the coordinator in the enqueue's
-- transaction, so at its commit and never after a rollback, and never on
-- a node (where NOTIFY would forbid the two-phase commit of a transaction
-- that wrote to two nodes).
SELECT count(pg_notify('hopper_jobs', p.payload))
FROM unnest(@payloads::text[]) AS p(payload);

-- name: ShardStatus :many
-- Each shard of the directory with its node (Citus's metadata) and its
-- migration version, for Set.ListShardStatus and `hopper shards status`.
SELECT s.position, s.name, s.shard_count,
       coalesce(n.node_name, '')::text AS node_name, coalesce(n.node_port, 0)::integer AS node_port,
       coalesce(v.version, 0)::bigint AS version, coalesce(v.dirty, false)::boolean AS dirty
FROM hopper_directory.hopper_shards AS s,
     hopper_directory.hopper_shard_node(s.name) AS n,
     hopper_directory.hopper_shard_version(s.name) AS v
ORDER BY s.position;
