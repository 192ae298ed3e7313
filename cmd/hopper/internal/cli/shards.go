package cli

import (
	"encoding/json"
	"flag"
	"fmt"

	"github.com/hopperq/hopper/shard"
)

// shardRow is one shard as shards status --json prints it.
type shardRow struct {
	Shard     string `json:"shard"`
	Position  int    `json:"position"`
	Node      string `json:"node"`
	Version   int    `json:"version"`
	Dirty     bool   `json:"dirty"`
	Live      int64  `json:"live"`
	Ready     int64  `json:"ready"`
	Running   int64  `json:"running"`
	Dead      int64  `json:"dead"`
	Cancelled int64  `json:"cancelled"`
}

func shardsCommand() *command {
	var count int
	var prefix string
	var asJSON bool
	actions := []string{"create", "status"}
	return &command{
		name:    "shards",
		actions: actions,
		args:    "create --count N [--prefix P] | status [--json]",
		summary: "a sharded Hopper on a Citus coordinator: create (or bring up to date) N shards, each a Hopper schema in a distributed schema, and the directory; " +
			"status: each shard's node, migration version and jobs; the job commands (jobs, history, dead, stats, ui) take --sharded to work across the shards",
		flags: func(fs *flag.FlagSet) {
			fs.IntVar(&count, "count", 0, "create: the number of shards (fixed for the deployment's life; job ids name their shard by it)")
			fs.StringVar(&prefix, "prefix", shard.DefaultPrefix, "create: the shards' schema names' prefix, followed by their position")
			fs.BoolVar(&asJSON, "json", false, "status: print JSON")
		},
		run: func(e *env, fs *flag.FlagSet, args []string) error {
			action, rest, err := pickAction("shards", args, actions...)
			if err != nil {
				return err
			}
			if len(rest) > 0 {
				return fmt.Errorf("%w: shards %s takes no argument", errUsage, action)
			}
			if err := actionFlags(fs, action, map[string][]string{"create": {"count", "prefix"}, "status": {"json"}}); err != nil {
				return err
			}
			if action == "create" && count < 1 {
				return fmt.Errorf("%w: shards create needs --count N (1 to %d)", errUsage, shard.MaxCount)
			}
			pool, err := e.connect()
			if err != nil {
				return err
			}
			defer pool.Close()
			if action == "create" {
				set, err := shard.Create(e.ctx, pool, shard.Options{Count: count, Prefix: prefix})
				if err != nil {
					return err
				}
				names := set.Names()
				fmt.Fprintf(e.stdout, "%d shards ready: %s to %s\n", set.Count(), names[0], names[len(names)-1])
				return nil
			}
			set, err := shard.Open(e.ctx, pool)
			if err != nil {
				return err
			}
			list, err := set.ListShardStatus(e.ctx)
			if err != nil {
				return err
			}
			if asJSON {
				rows := make([]shardRow, len(list))
				for i, s := range list {
					rows[i] = shardRow{Shard: s.Shard, Position: s.Position, Node: s.Node, Version: s.Version, Dirty: s.Dirty,
						Live: s.Counts.Live(), Ready: s.Counts.Ready, Running: s.Counts.Running, Dead: s.Counts.Dead, Cancelled: s.Counts.Cancelled}
				}
				return json.NewEncoder(e.stdout).Encode(rows)
			}
			return printTable(e.stdout, "shards", "SHARD\tPOSITION\tNODE\tVERSION\tLIVE\tREADY\tRUNNING\tDEAD\tCANCELLED", list, func(s shard.Status) string {
				version := fmt.Sprint(s.Version)
				if s.Dirty {
					version += " (dirty)"
				}
				return fmt.Sprintf("%s\t%d\t%s\t%s\t%d\t%d\t%d\t%d\t%d", s.Shard, s.Position, s.Node, version,
					s.Counts.Live(), s.Counts.Ready, s.Counts.Running, s.Counts.Dead, s.Counts.Cancelled)
			})
		},
	}
}
