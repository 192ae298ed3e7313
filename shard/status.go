package shard

import (
	"context"
	"fmt"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/shard/internal/sharddb"
)

// Status is one shard as `hopper shards status` shows it.
type Status struct {
	Shard    string
	Position int
	// Node is the host:port of the Citus node holding the shard (from
	// citus_shards; "" when Citus places none of its tables).
	Node string
	// Version is the shard's migration version, Dirty whether a
	// migration failed half-way (see hopper migrate).
	Version int
	Dirty   bool
	// Counts are its jobs by state, as hopper.Client.GetStats totals them.
	Counts hopper.Counts
}

// ListShardStatus is every shard's node, migration version and job
// counts, in position order.
func (s *Set) ListShardStatus(ctx context.Context) ([]Status, error) {
	rows, err := sharddb.New(s.pool).ShardStatus(ctx)
	if err != nil {
		return nil, fmt.Errorf("shards status: %w", err)
	}
	stats, err := s.ListShardStats(ctx)
	if err != nil {
		return nil, fmt.Errorf("shards status: %w", err)
	}
	byName := make(map[string]hopper.Counts, len(stats))
	for _, st := range stats {
		byName[st.Shard] = st.Total
	}
	out := make([]Status, len(rows))
	for i, r := range rows {
		out[i] = Status{Shard: r.Name, Position: int(r.Position), Version: int(r.Version), Dirty: r.Dirty, Counts: byName[r.Name]}
		if r.NodeName != "" {
			out[i].Node = fmt.Sprintf("%s:%d", r.NodeName, r.NodePort)
		}
	}
	return out, nil
}
