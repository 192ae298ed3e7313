package shard

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hopperq/hopper"
)

// ShardQueueDepth is one queue's depth in one shard.
type ShardQueueDepth struct {
	Shard string
	hopper.QueueDepth
}

// ListShardQueueDepths is hopper.Client.ListQueueDepths of every shard
// (each count up to limit; 0: hopper.DefaultDepthLimit), by shard in
// position order, then by queue. Each shard reads at most limit+1 entries
// of three indexes per queue: its cost grows with the shards and queues,
// not with the jobs.
func (s *Set) ListShardQueueDepths(ctx context.Context, limit int) ([]ShardQueueDepth, error) {
	per := make([][]hopper.QueueDepth, len(s.names))
	err := s.fanOut(ctx, func(ctx context.Context, k int, c *hopper.Client) error {
		var err error
		per[k], err = c.ListQueueDepths(ctx, limit)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("queue depths: %w", err)
	}
	var out []ShardQueueDepth
	for k, ds := range per {
		for _, d := range ds {
			out = append(out, ShardQueueDepth{Shard: s.names[k], QueueDepth: d})
		}
	}
	return out, nil
}

// CollectorOptions shape Set.Collector.
type CollectorOptions struct {
	// Limit caps each count of a queue's depth, as
	// hopper.Client.ListQueueDepths does (0: hopper.DefaultDepthLimit).
	Limit int
	// Timeout bounds one scrape's reads of the shards (0: 10s).
	Timeout time.Duration
}

// Collector is a prometheus.Collector of the set's queue depths, read
// from every shard at each scrape (ListShardQueueDepths, each count up to
// opts.Limit, up to eight shards at once):
//
//   - hopper_queue_depth{shard, queue, state}: a shard's ready, scheduled
//     and running jobs of a queue (the worker's gauge of one schema, with
//     a shard label);
//   - hopper_queue_oldest_ready_seconds{shard, queue}: the claim lag of a
//     queue in a shard;
//   - hopper_sharded_queue_depth{queue, state}: the same counts added up
//     over the shards, and hopper_sharded_queue_oldest_ready_seconds{queue}
//     the largest claim lag of any shard;
//   - hopper_shard_up{shard}: 1 when the shard's read went through, 0
//     when it failed (its series are then missing from that scrape, and
//     the totals count the shards that answered).
//
// A sharded worker's metrics (shard.NewWorker with Config.Registerer)
// carry the same shard label. Register one Collector per process that
// serves metrics; each scrape reads every shard.
func (s *Set) Collector(opts CollectorOptions) prometheus.Collector {
	if opts.Timeout <= 0 {
		opts.Timeout = 10 * time.Second
	}
	return &collector{set: s, opts: opts}
}

type collector struct {
	set  *Set
	opts CollectorOptions
}

var (
	depthDesc = prometheus.NewDesc("hopper_queue_depth",
		"Jobs per shard, queue and state (ready, scheduled, running), read from bounded index ranges.",
		[]string{"shard", "queue", "state"}, nil)
	oldestDesc = prometheus.NewDesc("hopper_queue_oldest_ready_seconds",
		"Age of the oldest ready job per shard and queue (claim lag).",
		[]string{"shard", "queue"}, nil)
	totalDepthDesc = prometheus.NewDesc("hopper_sharded_queue_depth",
		"Jobs per queue and state (ready, scheduled, running), added up over the shards that answered.",
		[]string{"queue", "state"}, nil)
	totalOldestDesc = prometheus.NewDesc("hopper_sharded_queue_oldest_ready_seconds",
		"Age of the oldest ready job per queue in any shard that answered (claim lag).",
		[]string{"queue"}, nil)
	upDesc = prometheus.NewDesc("hopper_shard_up",
		"1 when the shard's queue depths were read at this scrape, 0 when the read failed.",
		[]string{"shard"}, nil)
)

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{depthDesc, oldestDesc, totalDepthDesc, totalOldestDesc, upDesc} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.opts.Timeout)
	defer cancel()
	s := c.set
	per := make([][]hopper.QueueDepth, len(s.names))
	failed := make([]bool, len(s.names))
	_ = s.fanOut(ctx, func(ctx context.Context, k int, cl *hopper.Client) error {
		var err error
		per[k], err = cl.ListQueueDepths(ctx, c.opts.Limit)
		failed[k] = err != nil
		return nil
	})
	type total struct {
		ready, scheduled, running int64
		oldest                    time.Duration
	}
	totals := map[string]*total{}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for k, name := range s.names {
		if failed[k] {
			gauge(upDesc, 0, name)
			continue
		}
		gauge(upDesc, 1, name)
		for _, d := range per[k] {
			gauge(depthDesc, float64(d.Ready), name, d.Queue, "ready")
			gauge(depthDesc, float64(d.Scheduled), name, d.Queue, "scheduled")
			gauge(depthDesc, float64(d.Running), name, d.Queue, "running")
			gauge(oldestDesc, d.OldestReady.Seconds(), name, d.Queue)
			t := totals[d.Queue]
			if t == nil {
				t = &total{}
				totals[d.Queue] = t
			}
			t.ready += d.Ready
			t.scheduled += d.Scheduled
			t.running += d.Running
			t.oldest = max(t.oldest, d.OldestReady)
		}
	}
	for queue, t := range totals {
		gauge(totalDepthDesc, float64(t.ready), queue, "ready")
		gauge(totalDepthDesc, float64(t.scheduled), queue, "scheduled")
		gauge(totalDepthDesc, float64(t.running), queue, "running")
		gauge(totalOldestDesc, t.oldest.Seconds(), queue)
	}
}
