package cli

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/hopperq/hopper"
)

// statsReport is one refresh of hopper stats, as --json prints it.
type statsReport struct {
	Time   time.Time  `json:"time"`
	Queues []statsRow `json:"queues"`
	// Rates over the time since the previous refresh; absent on the first.
	EnqueuedPerSecond *float64 `json:"enqueued_per_second,omitempty"`
	FinishedPerSecond *float64 `json:"finished_per_second,omitempty"`
	// With --read-url: the server read is a standby, this far behind
	// (hopper.ReadLag). A standby's statistics count no writes, so its
	// reports carry no rates.
	// ReadLagUnknown: the standby receives no WAL (its primary is
	// unreachable), and read_lag_seconds is only a lower bound.
	Standby        bool     `json:"standby,omitempty"`
	ReadLagSeconds *float64 `json:"read_lag_seconds,omitempty"`
	ReadLagUnknown bool     `json:"read_lag_unknown,omitempty"`
	lag            *hopper.ReadLag
}

// statsRow is one queue and kind, as --json prints it.
type statsRow struct {
	Queue  string `json:"queue"`
	Kind   string `json:"kind"`
	Paused bool   `json:"paused"`
	// Live workers claiming from the queue. The worker registry records a
	// worker's queues, not its kinds: a kind no live worker handles still
	// shows its queue's workers.
	Workers            int     `json:"workers"`
	Ready              int64   `json:"ready"`
	Scheduled          int64   `json:"scheduled"`
	Running            int64   `json:"running"`
	Waiting            int64   `json:"waiting"` // behind the heads of their sequences
	Dead               int64   `json:"dead"`
	Cancelled          int64   `json:"cancelled"`
	OldestReadySeconds float64 `json:"oldest_ready_seconds"`
	RetryRate          float64 `json:"retry_rate"`
}

func rowOf(s hopper.StatsRow, workers int) statsRow {
	return statsRow{
		Queue: s.Queue, Kind: s.Kind, Paused: s.Paused, Workers: workers, Ready: s.Ready, Scheduled: s.Scheduled, Running: s.Running, Waiting: s.Waiting,
		Dead: s.Dead, Cancelled: s.Cancelled, OldestReadySeconds: s.OldestReady.Seconds(), RetryRate: s.RetryRate(),
	}
}

func statsCommand() *command {
	var watch, asJSON, sharded bool
	var interval time.Duration
	var readFrom string
	return &command{
		name:    "stats",
		args:    "[--watch] [--interval D] [--json] [--read-url URL | --sharded]",
		summary: "per queue and kind: ready, scheduled, running, waiting, dead, cancelled, claim lag, retry rate; the queue active or paused, and its live workers (of the queue, whatever kinds they handle); throughput with --watch",
		flags: func(fs *flag.FlagSet) {
			fs.BoolVar(&watch, "watch", false, "redraw every --interval until Ctrl-C")
			fs.BoolVar(&asJSON, "json", false, "print JSON (one object per refresh)")
			durationVar(fs, &interval, "interval", 2*time.Second, "refresh interval with --watch")
			declareReadURL(fs, &readFrom)
			declareSharded(fs, &sharded)
		},
		run: func(e *env, _ *flag.FlagSet, args []string) error {
			if len(args) > 0 || interval <= 0 {
				return fmt.Errorf("%w: stats takes no argument and a positive --interval", errUsage)
			}
			if sharded && readFrom != "" {
				return fmt.Errorf("%w: --sharded reads the coordinator (--database-url): it takes no --read-url", errUsage)
			}
			read := func(client *hopper.Client) (hopper.Stats, map[string]int, error) {
				stats, err := client.GetStats(e.ctx)
				if err != nil {
					return stats, nil, err
				}
				queues, err := client.ListQueues(e.ctx)
				if err != nil {
					return stats, nil, err
				}
				workers := map[string]int{}
				for _, q := range queues {
					workers[q.Name] = q.Workers
				}
				return stats, workers, nil
			}
			var client *hopper.Client
			var lag *hopper.ReadLag
			if sharded {
				set, pool, err := e.connectSet(commandMaxConns)
				if err != nil {
					return err
				}
				defer pool.Close()
				read = func(*hopper.Client) (hopper.Stats, map[string]int, error) { return shardedStats(e.ctx, set) }
			} else {
				var done func()
				var err error
				client, lag, done, err = e.connectReadClient(readFrom)
				if err != nil {
					return err
				}
				defer done()
			}
			var prev *hopper.Stats
			for {
				if lag != nil && prev != nil {
					l, err := client.GetReadLag(e.ctx)
					if err != nil {
						return err
					}
					lag = &l
				}
				stats, workers, err := read(client)
				if err != nil {
					return err
				}
				report := statsReport{Time: stats.At, Queues: make([]statsRow, len(stats.Rows))}
				for i, r := range stats.Rows {
					report.Queues[i] = rowOf(r, workers[r.Queue])
				}
				if lag != nil {
					secs := lag.Behind.Seconds()
					report.Standby, report.ReadLagSeconds, report.ReadLagUnknown, report.lag = lag.Standby, &secs, lag.Unknown, lag
				}
				if prev != nil && !report.Standby {
					enq, fin := stats.Rates(*prev)
					report.EnqueuedPerSecond, report.FinishedPerSecond = &enq, &fin
				}
				prev = &stats
				if asJSON {
					if err := json.NewEncoder(e.stdout).Encode(report); err != nil {
						return err
					}
				} else {
					if watch {
						fmt.Fprint(e.stdout, "\033[H\033[2J") // redraw in place, like top
					}
					printStats(e.stdout, report)
					if sharded && len(report.Queues) > 0 {
						fmt.Fprintln(e.stdout, shardedWorkersNote)
					}
				}
				if !watch {
					return nil
				}
				select {
				case <-e.ctx.Done():
					return nil
				case <-time.After(interval):
				}
			}
		},
	}
}

func printStats(w io.Writer, r statsReport) {
	fmt.Fprintf(w, "hopper stats at %s", r.Time.Format(time.TimeOnly))
	if r.EnqueuedPerSecond != nil {
		fmt.Fprintf(w, "   enqueued %.0f/s   finished %.0f/s", *r.EnqueuedPerSecond, *r.FinishedPerSecond)
	}
	if r.lag != nil {
		fmt.Fprintf(w, "   (%s)", r.lag)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "QUEUE\tKIND\tREADY\tSCHEDULED\tRUNNING\tWAITING\tDEAD\tCANCELLED\tCLAIM LAG\tRETRY RATE\tQUEUE STATE\tQUEUE WORKERS\t")
	for _, s := range r.Queues {
		state := "active"
		if s.Paused {
			state = "paused"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%.1f%%\t%s\t%s\t\n", s.Queue, s.Kind, s.Ready, s.Scheduled, s.Running, s.Waiting, s.Dead,
			s.Cancelled, (time.Duration(s.OldestReadySeconds * float64(time.Second))).Round(time.Millisecond), 100*s.RetryRate, state, workers(s.Workers))
	}
	tw.Flush()
	if len(r.Queues) == 0 {
		fmt.Fprintln(w, "(no jobs)")
		return
	}
	fmt.Fprintln(w, queueWorkersNote)
}

// shardedWorkersNote says what QUEUE WORKERS counts with --sharded.
const shardedWorkersNote = "--sharded: the counts are added up over the shards; QUEUE WORKERS is the fewest any shard has (0: a shard's jobs of the queue wait for a worker)"

// queueWorkersNote says what QUEUE WORKERS counts: the registry records a
// worker's queues, not the kinds it handles, so a kind no live worker
// handles shows its queue's workers all the same; its ready jobs and claim
// lag grow.
const queueWorkersNote = "QUEUE WORKERS: live workers claiming from the queue, whatever kinds they handle; a kind none of them handles still shows them (its READY and CLAIM LAG grow)"
