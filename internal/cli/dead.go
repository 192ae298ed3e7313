package cli

import (
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/jobs"
)

// inDeadTable are the states of the jobs hopper dead works on.
var inDeadTable = []jobs.State{jobs.StateDead, jobs.StateCancelled}

func deadCommand() *command {
	var l listFlags
	var olderThan string
	var all, yes bool
	return &command{
		name:    "dead",
		args:    "list | show ID | retry ID... | retry --kind K | purge --older-than D [--yes] | ...",
		summary: "triage the dead table (dead and cancelled jobs): list, show with error history, retry, purge",
		flags: func(fs *flag.FlagSet) {
			l.declare(fs, true)
			fs.Lookup("state").Usage = "dead, cancelled, or dead,cancelled (list: both; retry and purge: dead)"
			fs.Lookup("kind").Usage = "only this kind"
			fs.Lookup("queue").Usage = "only this queue"
			fs.StringVar(&olderThan, "older-than", "", "retry, purge: jobs that ended longer ago than this (e.g. 72h, 30d)")
			fs.BoolVar(&all, "all", false, "retry, purge: every dead job (with no other filter)")
			fs.BoolVar(&yes, "yes", false, "purge: do not ask for confirmation (purging by --kind, --queue, --older-than or --all asks first)")
		},
		run: func(e *env, _ *flag.FlagSet, args []string) error {
			action, rest, err := pickAction("dead", args, "list", "show", "retry", "purge")
			if err != nil {
				return err
			}
			var list hopper.ListParams
			var filter hopper.DeadFilter
			switch action {
			case "list":
				if len(rest) > 0 {
					return fmt.Errorf("%w: list takes no argument (filters are flags)", errUsage)
				}
				if list, err = l.params(); err != nil {
					return err
				}
				if len(list.States) == 0 {
					list.States = inDeadTable
				}
				for _, s := range list.States {
					if !hasState(inDeadTable, s) {
						return fmt.Errorf("%w: --state %s: the dead table holds dead and cancelled jobs (hopper jobs list --state %s)", errUsage, s, s)
					}
				}
			case "show":
			case "retry", "purge":
				if filter, err = deadFilter(rest, &l, olderThan, all); err != nil {
					return err
				}
			}
			client, done, err := e.connectClient()
			if err != nil {
				return err
			}
			defer done()
			switch action {
			case "list":
				return listJobs(e, client, list, &l, "dead list"+flagsAgain(&l, true))
			case "show":
				return showJob(e, client, rest, l.asJSON, inDeadTable...)
			case "retry":
				res, err := client.RetryDead(e.ctx, filter)
				fmt.Fprintf(e.stdout, "retried %s\n", plural(int64(len(res.Retried)), "job"))
				if err != nil {
					return err
				}
				if len(res.Kept) > 0 {
					fmt.Fprintf(e.stdout, "kept dead (a live job holds their unique key): %s\n", joinIDs(res.Kept))
				}
				if missing := missingIDs(filter.IDs, res.Retried, res.Kept); len(missing) > 0 {
					return fmt.Errorf("not retried (no such %s job): %s", joinStates(filterStates(filter), " or "), joinIDs(missing))
				}
				if len(res.Kept) > 0 {
					return fmt.Errorf("%s kept dead", plural(int64(len(res.Kept)), "job"))
				}
			case "purge":
				return purgeDead(e, client, filter, olderThan, yes)
			}
			return nil
		},
	}
}

// deadFilter reads the filters of dead retry and dead purge.
func deadFilter(args []string, l *listFlags, olderThan string, all bool) (hopper.DeadFilter, error) {
	f := hopper.DeadFilter{Kind: l.kind, Queue: l.queue, All: all}
	if len(args) > 0 {
		ids, err := parseIDs(args)
		if err != nil {
			return f, err
		}
		f.IDs = ids
	}
	if olderThan != "" {
		d, err := parseDuration(olderThan)
		if err != nil || d <= 0 {
			return f, fmt.Errorf("%w: --older-than wants a positive duration like 72h or 30d, not %q", errUsage, olderThan)
		}
		f.DiedBefore = time.Now().Add(-d)
	}
	if l.states != "" {
		for _, name := range strings.Split(l.states, ",") {
			s, err := jobs.ParseState(strings.TrimSpace(name))
			if err != nil || !hasState(inDeadTable, s) {
				return f, fmt.Errorf("%w: --state wants dead, cancelled or dead,cancelled, not %q", errUsage, l.states)
			}
			f.States = append(f.States, s)
		}
	}
	if l.uniqueKey != "" || l.since != "" || l.until != "" || l.after != "" {
		return f, fmt.Errorf("%w: retry and purge take job ids, --kind, --queue, --older-than, --state or --all", errUsage)
	}
	if len(f.IDs) == 0 && f.Kind == "" && f.Queue == "" && f.DiedBefore.IsZero() && !all {
		return f, fmt.Errorf("%w: say which jobs: ids, --kind, --queue, --older-than, or --all", errUsage)
	}
	if all && (len(f.IDs) > 0 || f.Kind != "" || f.Queue != "" || !f.DiedBefore.IsZero()) {
		return f, fmt.Errorf("%w: --all takes no other filter", errUsage)
	}
	return f, nil
}

func filterStates(f hopper.DeadFilter) []jobs.State {
	if len(f.States) == 0 {
		return []jobs.State{jobs.StateDead}
	}
	return f.States
}

// missingIDs are the asked ids that were neither retried nor kept.
func missingIDs(asked []int64, found ...[]int64) []int64 {
	seen := map[int64]bool{}
	for _, ids := range found {
		for _, id := range ids {
			seen[id] = true
		}
	}
	var missing []int64
	for _, id := range asked {
		if !seen[id] {
			missing = append(missing, id)
			seen[id] = true
		}
	}
	return missing
}

func joinIDs(ids []int64) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = fmt.Sprint(id)
	}
	return strings.Join(s, ", ")
}
