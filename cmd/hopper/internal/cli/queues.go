package cli

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/jobs"
)

// queueRow is one queue, as queues list --json prints it: a duration is
// in seconds, as in every --json output.
type queueRow struct {
	Name string `json:"name"`
	// Paused: an operator paused the queue (PausedAt, when); else it is
	// active. Workers: the live workers serving it.
	Paused             bool       `json:"paused"`
	PausedAt           *time.Time `json:"paused_at,omitempty"`
	Workers            int        `json:"workers"`
	Ready              int64      `json:"ready"`
	Scheduled          int64      `json:"scheduled"`
	Running            int64      `json:"running"`
	Waiting            int64      `json:"waiting"` // behind the heads of their sequences
	Dead               int64      `json:"dead"`
	Cancelled          int64      `json:"cancelled"`
	OldestReadySeconds float64    `json:"oldest_ready_seconds"`
}

func queuesCommand() *command {
	var asJSON, yes bool
	actions := []string{"list", "pause", "resume", "purge"}
	return &command{
		name:    "queues",
		actions: actions,
		args:    "list [--json] | pause NAME | resume NAME | purge NAME [--yes]",
		summary: "list queues (active or paused, live workers, jobs by state); pause a queue (no worker claims its jobs) or resume it; " +
			"purge: delete its pending, scheduled and waiting jobs (asks first unless --yes)",
		flags: func(fs *flag.FlagSet) {
			fs.BoolVar(&asJSON, "json", false, "list: print JSON")
			fs.BoolVar(&yes, "yes", false, "purge: do not ask for confirmation")
		},
		run: func(e *env, _ *flag.FlagSet, args []string) error {
			action, rest, err := pickAction("queues", args, actions...)
			switch {
			case err != nil:
				return err
			case action == "list" && len(rest) > 0:
				return fmt.Errorf("%w: list takes no argument", errUsage)
			case action != "list" && len(rest) != 1:
				return fmt.Errorf("%w: %s takes one queue name", errUsage, action)
			case action != "list":
				if err := jobs.ValidateQueue(rest[0]); err != nil {
					return fmt.Errorf("%w: %v", errUsage, err)
				}
			}
			client, done, err := e.connectClient()
			if err != nil {
				return err
			}
			defer done()
			switch action {
			case "list":
				return listQueues(e, client, asJSON)
			case "purge":
				return purgeQueue(e, client, rest[0], yes)
			case "pause":
				res, err := client.PauseQueue(e.ctx, rest[0])
				if errors.Is(err, hopper.ErrUnknownQueue) {
					return unknownQueue(rest[0])
				}
				if err != nil {
					return err
				}
				if !res.Changed {
					fmt.Fprintf(e.stdout, "queue %s was paused already (since %s)\n", rest[0], stamp(res.PausedAt))
					return nil
				}
				fmt.Fprintf(e.stdout, "queue %s paused: no worker claims its jobs until hopper queues resume %s (running jobs finish)\n", rest[0], rest[0])
			case "resume":
				res, err := client.ResumeQueue(e.ctx, rest[0])
				if errors.Is(err, hopper.ErrUnknownQueue) {
					return unknownQueue(rest[0])
				}
				if err != nil {
					return err
				}
				if !res.Changed {
					fmt.Fprintf(e.stdout, "queue %s was not paused\n", rest[0])
					return nil
				}
				fmt.Fprintf(e.stdout, "queue %s resumed\n", rest[0])
			}
			return nil
		},
	}
}

func listQueues(e *env, client *hopper.Client, asJSON bool) error {
	queues, err := client.ListQueues(e.ctx)
	if err != nil {
		return err
	}
	rows := make([]queueRow, len(queues))
	for i, q := range queues {
		rows[i] = queueRow{Name: q.Name, Paused: q.Paused(), PausedAt: q.PausedAt, Workers: q.Workers,
			Ready: q.Ready, Scheduled: q.Scheduled, Running: q.Running, Waiting: q.Waiting, Dead: q.Dead, Cancelled: q.Cancelled,
			OldestReadySeconds: q.OldestReady.Seconds()}
	}
	if asJSON {
		return json.NewEncoder(e.stdout).Encode(rows)
	}
	return printTable(e.stdout, "queues", "QUEUE\tSTATE\tWORKERS\tREADY\tSCHEDULED\tRUNNING\tWAITING\tDEAD\tCANCELLED\tCLAIM LAG", queues, func(q hopper.QueueInfo) string {
		return fmt.Sprintf("%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s", q.Name, queueState(q.PausedAt), workers(q.Workers), q.Ready, q.Scheduled, q.Running,
			q.Waiting, q.Dead, q.Cancelled, q.OldestReady.Round(time.Millisecond))
	})
}

// queueState says whether a queue is paused, and since when, or active:
// not paused, which does not say that a worker serves it (see workers).
func queueState(pausedAt *time.Time) string {
	if pausedAt != nil {
		return "paused since " + stamp(*pausedAt)
	}
	return "active"
}

// workers says how many live workers serve a queue: "no worker" rather
// than 0, since then its jobs wait, paused or not.
func workers(n int) string {
	if n == 0 {
		return "no worker"
	}
	return plural(int64(n), "worker")
}

// purgeQueue deletes every pending, scheduled and waiting job of a queue, asking
// first unless yes.
func purgeQueue(e *env, client *hopper.Client, queue string, yes bool) error {
	if !yes {
		stats, err := client.GetStats(e.ctx)
		if err != nil {
			return err
		}
		var ready, scheduled int64
		for _, s := range stats.Rows {
			if s.Queue == queue {
				ready += s.Ready
				scheduled += s.Scheduled
			}
		}
		if ready+scheduled == 0 {
			fmt.Fprintf(e.stdout, "nothing to delete: queue %q has no pending or scheduled jobs\n", queue)
			return nil
		}
		question := fmt.Sprintf("Delete %s of queue %q (%d pending, %d scheduled; running jobs finish)? [y/N] ",
			plural(ready+scheduled, "job"), queue, ready, scheduled)
		if err := confirm(e, question, "deleted", false); err != nil {
			return err
		}
	}
	n, err := client.PurgeQueue(e.ctx, queue)
	if errors.Is(err, hopper.ErrUnknownQueue) {
		return unknownQueue(queue)
	}
	if err != nil {
		return err
	}
	if n == 0 {
		fmt.Fprintf(e.stdout, "nothing to delete: queue %q has no pending or scheduled jobs\n", queue)
		return nil
	}
	fmt.Fprintf(e.stdout, "deleted %s (pending, scheduled and waiting) of queue %q\n", plural(n, "job"), queue)
	return nil
}

// unknownQueue is the one line for a queue name Hopper does not know.
func unknownQueue(name string) error {
	return fmt.Errorf("no queue %q: no worker serves it and it has no jobs (hopper queues list shows the queues)", name)
}
