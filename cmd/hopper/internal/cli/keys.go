package cli

import (
	"encoding/json"
	"flag"
	"fmt"
	"strconv"
	"time"

	"github.com/hopperq/hopper"
)

// keysReport is what hopper keys --json prints.
type keysReport struct {
	Keys []keyRow    `json:"keys"`
	Rate []budgetRow `json:"rate_limits"`
}

type keyRow struct {
	Queue     string `json:"queue"`
	Key       string `json:"key"`
	Ready     int64  `json:"ready"`
	Running   int64  `json:"running"`
	Scheduled int64  `json:"scheduled"`
}

type budgetRow struct {
	Queue   string  `json:"queue"`
	Group   string  `json:"group"`
	Limit   int     `json:"limit"`
	PerSecs float64 `json:"per_seconds"`
	Used    int     `json:"used"`
	Left    int     `json:"left"`
}

func keysCommand() *command {
	var queue string
	var limit int
	var asJSON bool
	return &command{
		name:    "keys",
		actions: []string{"limit", "unlimit", "limits"},
		args:    "[--queue NAME] [--limit N] [--json] | limit QUEUE KEY N | unlimit QUEUE KEY | limits [--queue NAME] [--json]",
		summary: "flow control: the concurrency keys with the most ready jobs (ready, running, scheduled per key) and the global rate limits' budgets; " +
			"limit: set one key's own limit of running jobs in a queue (over the queue's and kind's KeyLimit, from the next claim); unlimit: remove it; limits: list them",
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&queue, "queue", "", "only this queue")
			fs.IntVar(&limit, "limit", hopper.DefaultKeysLimit, fmt.Sprintf("how many keys (1 to %d)", hopper.MaxKeysLimit))
			fs.BoolVar(&asJSON, "json", false, "print JSON")
		},
		run: func(e *env, _ *flag.FlagSet, args []string) error {
			if len(args) > 0 {
				return keyLimitAction(e, args, queue, limit, asJSON)
			}
			if limit < 1 || limit > hopper.MaxKeysLimit {
				return fmt.Errorf("%w: --limit %d is outside 1 to %d", errUsage, limit, hopper.MaxKeysLimit)
			}
			client, done, err := e.connectClient()
			if err != nil {
				return err
			}
			defer done()
			keys, err := client.ListKeys(e.ctx, queue, limit)
			if err != nil {
				return err
			}
			budgets, err := client.ListRateBudgets(e.ctx)
			if err != nil {
				return err
			}
			report := keysReport{Keys: make([]keyRow, len(keys)), Rate: []budgetRow{}}
			for i, k := range keys {
				report.Keys[i] = keyRow{Queue: k.Queue, Key: k.Key, Ready: k.Ready, Running: k.Running, Scheduled: k.Scheduled}
			}
			for _, b := range budgets {
				if queue == "" || b.Queue == queue {
					report.Rate = append(report.Rate, budgetRow{Queue: b.Queue, Group: b.Group, Limit: b.Limit,
						PerSecs: b.Per.Seconds(), Used: b.Used, Left: b.Left()})
				}
			}
			if asJSON {
				return json.NewEncoder(e.stdout).Encode(report)
			}
			fmt.Fprintln(e.stdout, "keys with the most ready jobs:")
			if err := printTable(e.stdout, "keyed jobs", "QUEUE\tKEY\tREADY\tRUNNING\tSCHEDULED", report.Keys, func(k keyRow) string {
				return fmt.Sprintf("%s\t%s\t%d\t%d\t%d", k.Queue, k.Key, k.Ready, k.Running, k.Scheduled)
			}); err != nil {
				return err
			}
			fmt.Fprintln(e.stdout, "rate limits (claims in the current window):")
			return printTable(e.stdout, "global rate limit in use", "QUEUE\tGROUP\tUSED\tLIMIT\tPER\tLEFT", report.Rate, func(b budgetRow) string {
				group := b.Group
				if group == "" {
					group = "(queue)"
				}
				return fmt.Sprintf("%s\t%s\t%d\t%d\t%gs\t%d", b.Queue, group, b.Used, b.Limit, b.PerSecs, b.Left)
			})
		},
	}
}

// keyLimitRow is one key's own limit, as keys limits --json prints it.
type keyLimitRow struct {
	Queue      string    `json:"queue"`
	Key        string    `json:"key"`
	MaxRunning int       `json:"max_running"`
	Running    int64     `json:"running"`
	UpdatedAt  time.Time `json:"updated_at"`
}

// keyLimitAction runs keys limit, unlimit and limits: the keys' own
// limits (hopper_key_limits).
func keyLimitAction(e *env, args []string, queue string, limit int, asJSON bool) error {
	action, rest, err := pickAction("keys", args, "limit", "unlimit", "limits")
	switch {
	case err != nil:
		return err
	case action == "limit" && len(rest) != 3:
		return fmt.Errorf("%w: keys limit takes a queue, a key and a number of jobs", errUsage)
	case action == "unlimit" && len(rest) != 2:
		return fmt.Errorf("%w: keys unlimit takes a queue and a key", errUsage)
	case action == "limits" && len(rest) > 0:
		return fmt.Errorf("%w: keys limits takes no argument", errUsage)
	case limit < 1 || limit > hopper.MaxKeysLimit:
		return fmt.Errorf("%w: --limit %d is outside 1 to %d", errUsage, limit, hopper.MaxKeysLimit)
	}
	n := 0
	if action == "limit" {
		if n, err = strconv.Atoi(rest[2]); err != nil || n < 1 || n > hopper.MaxKeyLimitRunning {
			return fmt.Errorf("%w: keys limit: %q is not a number of jobs from 1 to %d", errUsage, rest[2], hopper.MaxKeyLimitRunning)
		}
	}
	client, done, err := e.connectClient()
	if err != nil {
		return err
	}
	defer done()
	switch action {
	case "limit":
		if err := client.SetKeyLimit(e.ctx, rest[0], rest[1], n); err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "key %s of queue %s: at most %d running, from the next claim\n", rest[1], rest[0], n)
		return nil
	case "unlimit":
		had, err := client.DeleteKeyLimit(e.ctx, rest[0], rest[1])
		if err != nil {
			return err
		}
		if !had {
			fmt.Fprintf(e.stdout, "key %s of queue %s had no limit of its own\n", rest[1], rest[0])
			return nil
		}
		fmt.Fprintf(e.stdout, "key %s of queue %s: its queue's or kind's limit again, from the next claim\n", rest[1], rest[0])
		return nil
	}
	found, err := client.ListKeyLimits(e.ctx, queue, limit)
	if err != nil {
		return err
	}
	rows := make([]keyLimitRow, len(found))
	for i, k := range found {
		rows[i] = keyLimitRow{Queue: k.Queue, Key: k.Key, MaxRunning: k.MaxRunning, Running: k.Running, UpdatedAt: k.UpdatedAt}
	}
	if asJSON {
		return json.NewEncoder(e.stdout).Encode(rows)
	}
	return printTable(e.stdout, "key limit", "QUEUE\tKEY\tLIMIT\tRUNNING\tSET", rows, func(k keyLimitRow) string {
		return fmt.Sprintf("%s\t%s\t%d\t%d\t%s", k.Queue, k.Key, k.MaxRunning, k.Running, stamp(k.UpdatedAt))
	})
}
