package cli

import (
	"errors"
	"flag"
	"fmt"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/jobs"
)

func cancelCommand() *command {
	return &command{
		name:    "cancel",
		args:    "ID...",
		summary: "cancel jobs: pending, scheduled, and running ones (their workers stop them); kept as cancelled in the dead table",
		run: func(e *env, _ *flag.FlagSet, args []string) error {
			ids, err := parseIDs(args)
			if err != nil {
				return err
			}
			client, done, err := e.connectClient()
			if err != nil {
				return err
			}
			defer done()
			results, err := client.CancelJobs(e.ctx, ids...)
			if err != nil {
				return err
			}
			failed := 0
			for _, r := range results {
				switch {
				case r.Err == nil && r.Was == jobs.StateRunning:
					fmt.Fprintf(e.stdout, "job %d: cancelled while running (its worker cancels the handler; any result it sends is refused)\n", r.ID)
				case r.Err == nil:
					fmt.Fprintf(e.stdout, "job %d: cancelled (it was %s)\n", r.ID, r.Was)
				case errors.Is(r.Err, hopper.ErrFinished):
					failed++
					fmt.Fprintf(e.stdout, "job %d: not cancelled: it is %s already\n", r.ID, r.Was)
				default:
					failed++
					fmt.Fprintf(e.stdout, "job %d: no such job\n", r.ID)
				}
			}
			if failed > 0 {
				return fmt.Errorf("%d of %d jobs not cancelled", failed, len(results))
			}
			return nil
		},
	}
}

func purgeCommand() *command {
	var queue string
	var yes bool
	return &command{
		name:    "purge",
		args:    "--queue Q [--yes]",
		summary: "delete every pending and scheduled job of a queue, without a trace (running jobs finish); asks first unless --yes",
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&queue, "queue", "", "the queue to empty (required)")
			fs.BoolVar(&yes, "yes", false, "do not ask for confirmation")
		},
		run: func(e *env, _ *flag.FlagSet, args []string) error {
			if queue == "" || len(args) > 0 {
				return fmt.Errorf("%w: --queue is required and nothing else", errUsage)
			}
			client, done, err := e.connectClient()
			if err != nil {
				return err
			}
			defer done()
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
			fmt.Fprintf(e.stdout, "deleted %s (pending and scheduled) of queue %q\n", plural(n, "job"), queue)
			return nil
		},
	}
}

// unknownQueue is the one line for a queue name Hopper does not know.
func unknownQueue(name string) error {
	return fmt.Errorf("no queue %q: no worker serves it and it has no jobs (hopper queue list shows the queues)", name)
}
