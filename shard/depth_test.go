package shard

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/internal/schemascope"
	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
)

// TestCollector: on plain PostgreSQL, a Set of two Hopper schemas and one
// schema that does not exist: the collector exports each answering
// shard's depths with its shard label and their sums, and says which
// shard did not answer (hopper_shard_up 0) instead of failing the
// scrape. tests/citus runs it on a formation.
func TestCollector(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, b := testdb.New(t), testdb.New(t)
	s := &Set{pool: a.Pool}
	var scopes []jobs.DBTX
	for _, name := range []string{a.Schema, b.Schema, "hopper_no_such_shard"} {
		scoped, err := jobs.InSchema(a.Pool, name)
		require.NoError(t, err)
		s.names = append(s.names, name)
		s.clients = append(s.clients, hopper.NewClient(scoped))
		s.scopes = append(s.scopes, scoped.(*schemascope.DB))
		scopes = append(scopes, scoped)
	}
	for i, n := range []int{2, 3} {
		for range n {
			_, err := cancelKind.Enqueue(ctx, scopes[i], cancelPayload{}, jobs.Queue("mail"))
			require.NoError(t, err)
		}
	}
	_, err := cancelKind.Enqueue(ctx, b.Pool, cancelPayload{}, jobs.Queue("mail"), jobs.Delay(time.Hour))
	require.NoError(t, err)

	reg := prometheus.NewPedanticRegistry() // checks the metrics against their descriptions
	require.NoError(t, reg.Register(s.Collector(CollectorOptions{})))
	families, err := reg.Gather()
	require.NoError(t, err)
	got := map[string]float64{}
	for _, mf := range families {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			got[mf.GetName()+"{"+strings.Join(labels, ",")+"}"] = m.GetGauge().GetValue()
		}
	}
	want := map[string]float64{
		"hopper_shard_up{shard=" + a.Schema + "}":                1,
		"hopper_shard_up{shard=" + b.Schema + "}":                1,
		"hopper_shard_up{shard=hopper_no_such_shard}":            0,
		"hopper_sharded_queue_depth{queue=mail,state=ready}":     5,
		"hopper_sharded_queue_depth{queue=mail,state=scheduled}": 1,
		"hopper_sharded_queue_depth{queue=mail,state=running}":   0,
		"hopper_sharded_queue_oldest_ready_seconds{queue=mail}":  got["hopper_sharded_queue_oldest_ready_seconds{queue=mail}"],
	}
	for _, sh := range []struct {
		name                      string
		ready, scheduled, running float64
	}{{a.Schema, 2, 0, 0}, {b.Schema, 3, 1, 0}} {
		want["hopper_queue_depth{queue=mail,shard="+sh.name+",state=ready}"] = sh.ready
		want["hopper_queue_depth{queue=mail,shard="+sh.name+",state=scheduled}"] = sh.scheduled
		want["hopper_queue_depth{queue=mail,shard="+sh.name+",state=running}"] = sh.running
		lag := "hopper_queue_oldest_ready_seconds{queue=mail,shard=" + sh.name + "}"
		want[lag] = got[lag]
		require.Contains(t, got, lag)
		require.LessOrEqual(t, got[lag], got["hopper_sharded_queue_oldest_ready_seconds{queue=mail}"], "the total lag is the largest")
	}
	require.Equal(t, want, got, "nothing of the missing shard but its hopper_shard_up 0")

	depths, err := s.ListShardQueueDepths(ctx, 0)
	require.ErrorContains(t, err, "shard hopper_no_such_shard", "the list fails, naming the shard")
	require.Nil(t, depths)
}
