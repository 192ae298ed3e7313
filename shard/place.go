package shard

import (
	"crypto/md5"
	"encoding/binary"

	"github.com/hopperq/hopper/jobs"
)

// Position is the position (0 to count-1) of the shard a routing key
// places a job in: the first four bytes of the MD5 of the key's UTF-8
// bytes, read as a big-endian unsigned integer, modulo count. The SQL
// function hopper_directory.hopper_shard_position(key, count), which
// Create installs on the coordinator, computes the same, so that jobs
// enqueued by Go and by the SQL API with one key meet in one shard. MD5
// is a spreading function here, not a security one: any key may be
// chosen to land in any shard.
func Position(key string, count int) int {
	if count < 1 {
		return 0
	}
	sum := md5.Sum([]byte(key))
	return int(binary.BigEndian.Uint32(sum[:4]) % uint32(count))
}

// place is the position of an entry's shard, by the first of: its
// sequence key (the Sequence option, SequenceBy or jobs.MetaSequence: a
// sequence's jobs must meet to run in order), its unique key (jobs
// sharing a key must meet to be deduplicated), its concurrency key (its
// limits and fairness are per shard), the routing key given, or else the
// next shard in turn. A workflow's steps are placed by the workflow's id
// instead (Set.EnqueueWorkflow).
func (s *Set) place(e jobs.Entry, routingKey string) int {
	switch {
	case e.SequenceKey() != "":
		return Position(e.SequenceKey(), len(s.names))
	case e.UniqueKey() != "":
		return Position(e.UniqueKey(), len(s.names))
	case e.ConcurrencyKey() != "":
		return Position(e.ConcurrencyKey(), len(s.names))
	case routingKey != "":
		return Position(routingKey, len(s.names))
	default:
		return int((s.next.Add(1) - 1) % uint64(len(s.names)))
	}
}
