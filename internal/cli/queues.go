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

func queueCommand() *command {
	var asJSON bool
	return &command{
		name:    "queue",
		args:    "list | pause Q | resume Q",
		summary: "list queues with their state and jobs; pause a queue (no worker claims its jobs) or resume it",
		flags: func(fs *flag.FlagSet) {
			fs.BoolVar(&asJSON, "json", false, "list: print JSON")
		},
		run: func(e *env, _ *flag.FlagSet, args []string) error {
			action, rest, err := pickAction("queue", args, "list", "pause", "resume")
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
				fmt.Fprintf(e.stdout, "queue %s paused: no worker claims its jobs until hopper queue resume %s (running jobs finish)\n", rest[0], rest[0])
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
			case "list":
				queues, err := client.ListQueues(e.ctx)
				if err != nil {
					return err
				}
				if asJSON {
					return json.NewEncoder(e.stdout).Encode(queues)
				}
				return printTable(e.stdout, "queues", "QUEUE\tSTATE\tREADY\tSCHEDULED\tRUNNING\tDEAD\tCANCELLED\tCLAIM LAG", queues, func(q hopper.QueueInfo) string {
					state := "running"
					if q.PausedAt != nil {
						state = "paused since " + stamp(*q.PausedAt)
					}
					return fmt.Sprintf("%s\t%s\t%d\t%d\t%d\t%d\t%d\t%s", q.Name, state, q.Ready, q.Scheduled, q.Running,
						q.Dead, q.Cancelled, q.OldestReady.Round(time.Millisecond))
				})
			}
			return nil
		},
	}
}
