package cli

import (
	"encoding/json"
	"flag"
	"fmt"

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
		args:    "[--queue NAME] [--limit N] [--json]",
		summary: "flow control: the concurrency keys with the most ready jobs (ready, running, scheduled per key) and the global rate limits' budgets",
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&queue, "queue", "", "only this queue")
			fs.IntVar(&limit, "limit", hopper.DefaultKeysLimit, fmt.Sprintf("how many keys (1 to %d)", hopper.MaxKeysLimit))
			fs.BoolVar(&asJSON, "json", false, "print JSON")
		},
		run: func(e *env, _ *flag.FlagSet, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("%w: keys takes no argument", errUsage)
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
