package shard

import "errors"

// Errors of the sharded set-up and Client, matched with errors.Is.
var (
	// ErrNotCitus: the database has no citus extension; a sharded Hopper
	// needs a Citus coordinator (CREATE EXTENSION citus, and worker nodes
	// added with citus_add_node).
	ErrNotCitus = errors.New("hopper: not a Citus coordinator")
	// ErrNoDirectory: the database has no shard directory (Create has not
	// run on it).
	ErrNoDirectory = errors.New("hopper: no shard directory")
	// ErrCountMismatch: Create was asked for a shard count (or prefix)
	// other than the one the directory records. The count is fixed for
	// the life of a deployment: job ids name their shard by it.
	ErrCountMismatch = errors.New("hopper: shard count differs from the directory's")
	// ErrNotDistributed: a shard's schema exists and is not a distributed
	// schema (schema-based sharding), so its tables would not live whole
	// on one node.
	ErrNotDistributed = errors.New("hopper: shard schema is not distributed")
	// ErrInvalidOptions: a shard count below 1 or above MaxCount, or a
	// prefix that cannot make schema names.
	ErrInvalidOptions = errors.New("hopper: invalid shard options")
)
