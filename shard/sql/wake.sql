-- Wake-ups a shard's functions no longer send (migration 34: a shard is
-- silent, so that a transaction through the coordinator may commit in
-- two phases). An operation of the Set that makes jobs ready in a shard
-- where it cannot tell their queues (a sequence skipped or retried, a
-- workflow enqueued, retried or cancelled) wakes every queue of the
-- shard, on the coordinator, with NotifyShards. Unqualified names: the
-- statement runs in the shard's schema (search_path set per statement).

-- name: ShardQueues :many
-- The shard's queues, as its workers register them: a small table, one
-- row a queue.
SELECT q.name FROM hopper_queues AS q ORDER BY q.name;

-- name: NotifyJobsEnded :exec
-- Tells those who wait for jobs to end (hopper_job_ended, as the shard's
-- hopper_durable_ended would on plain PostgreSQL) that the jobs of the
-- payload ({"schema", "ids", "more"}) ended: sent on the coordinator, at
-- the commit of the cancel that ended them.
SELECT pg_notify('hopper_job_ended', @payload::text);
