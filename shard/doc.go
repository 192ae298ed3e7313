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
//     job by its sequence key, else its unique key, else its concurrency
//     key, else a routing key, else the next shard in turn (Position is
//     the hash, the same as the SQL function
//     hopper_directory.hopper_shard_position), write each shard touched
//     with one statement, and wake the shards' workers with one pg_notify
//     on the coordinator, in the same transaction: a sequence's jobs run
//     in order and a unique key deduplicates, each within its shard;
//   - EnqueueWorkflow and EnqueueWorkflows place a workflow's steps in the
//     shard of its id, and ListWorkflow, CancelWorkflow and RetryWorkflow
//     find them there; GetSequence, SkipSequence and RetrySequence work on
//     the shard of the sequence's key;
//   - a job's id names its shard (id mod Count), so GetJob, CancelJob and
//     the other operations by id touch one shard, through the
//     hopper.Client of that shard (Set.Client);
//   - ListJobs and GetStats read every shard and merge.
//
// A shard sends no NOTIFY (Create makes it silent, migration 34:
// PostgreSQL refuses to PREPARE a transaction that ran NOTIFY, and Citus
// commits a transaction over two nodes in two phases). Its workers listen
// on the coordinator instead, and are woken there: by the Set, for what
// its enqueues, cancels, deletes, skips and retries make ready (every queue of the
// shard when it cannot tell which), and by the sharded Worker itself,
// whose runtime claims again in its shard after a job of a sequence or a
// workflow ends there (other processes serving that shard hear nothing,
// and find the job at their next poll). A job made ready by a shard's own
// functions otherwise (a durable job's event, an operation through
// Set.Client that is not one of the Set's) waits for the next poll
// (worker.Config.PollInterval).
//
// Worker serves a list of shards (Set.Names) with one worker runtime per
// shard, each claiming and keeping up its own shard.
package shard
