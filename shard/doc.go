// Package shard runs Hopper past one machine, on a Citus coordinator with
// schema-based sharding: a sharded Hopper is a fixed number of shards,
// each a Hopper schema in a distributed schema (its tables live whole on
// one node, and every trigger, workflow, sequence and unique key works
// inside it as on plain PostgreSQL), and a small directory on the
// coordinator that lists them. docs/scaling-out.md is the guide.
//
// Create sets it up (or brings it up to date) and Open reads the
// directory; either returns a Set, the sharded Client:
//
//   - Enqueue, EnqueueRouted, EnqueueMany and Set.EnqueueBatch place each
//     job by its unique key, else its concurrency key, else a routing key,
//     else the next shard in turn (Position is the hash, the same as the
//     SQL function hopper_directory.hopper_shard_position), write each
//     shard touched with one statement, and wake the shards' workers with
//     one pg_notify on the coordinator, in the same transaction;
//   - a job's id names its shard (id mod Count), so GetJob, CancelJob and
//     the other operations by id touch one shard, through the
//     hopper.Client of that shard (Set.Client);
//   - ListJobs and GetStats read every shard and merge.
//
// Worker serves a list of shards (Set.Names) with one worker runtime per
// shard, each claiming and keeping up its own shard.
package shard
