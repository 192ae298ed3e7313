package cli

import (
	"errors"
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
	var all, yes, sharded bool
	return &command{
		name:    "dead",
		actions: []string{"list", "show", "retry", "purge"},
		args:    "list [filters] [--json] | show ID [--json] | retry ID... | retry FILTER... | purge ID... | purge FILTER... [--yes]",
		summary: "triage the dead table (dead and cancelled jobs): list, show with error history, retry, purge",
		flags: func(fs *flag.FlagSet) {
			l.declare(fs, true)
			fs.Lookup("state").Usage = "dead, cancelled, or dead,cancelled (list, and retry or purge by id: both; retry and purge by filter: dead)"
			fs.Lookup("kind").Usage = "only this kind"
			fs.Lookup("queue").Usage = "only this queue"
			fs.StringVar(&olderThan, "older-than", "", "retry, purge: jobs that ended longer ago than this (e.g. 72h, 30d)")
			fs.BoolVar(&all, "all", false, "retry, purge: every dead job (with no other filter)")
			fs.BoolVar(&yes, "yes", false, "purge: do not ask for confirmation (purging by --kind, --queue, --older-than or --all asks first)")
			declareSharded(fs, &sharded)
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
			if sharded && action == "retry" {
				// RetryDead's INSERT … SELECT between two tables of a shard:
				// Citus 13.2 pushes it down as "WHERE ( IS NOT NULL)".
				return errors.New("dead retry does not run on a sharded Hopper yet: Citus cannot run its statement through the coordinator (hopper dead list --sharded finds the jobs)")
			}
			e.sharded = sharded
			client, done, err := e.connectJobs()
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
				res, err := client.RetryDeadJobs(e.ctx, filter)
				if err == nil && len(filter.IDs) == 0 && len(res.Retried) == 0 && len(res.Kept) == 0 {
					return nothingToRetry(e, client, filter, &l, olderThan)
				}
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
			name = strings.TrimSpace(name)
			s, err := jobs.ParseState(name)
			if err != nil || !hasState(inDeadTable, s) {
				return f, fmt.Errorf("%w: --state wants dead, cancelled or dead,cancelled, not %q%s", errUsage, l.states,
					didYouMean(name, "", stateNames(inDeadTable)))
			}
			f.States = append(f.States, s)
		}
	}
	if len(f.IDs) > 0 && len(f.States) == 0 {
		// An id names one job, which dead list shows dead or cancelled:
		// "no such dead job" for a cancelled one it lists would be wrong.
		// The default of dead only guards filters that choose many jobs.
		f.States = inDeadTable
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

// nothingToRetry says that a retry by filter matched no job, repeating
// the filter, and how many jobs of the state it left out (dead or
// cancelled) would have matched, so that "retried 0 jobs" is never all a
// typo in --kind, or a cancelled job kept by the default --state dead,
// gets back.
func nothingToRetry(e *env, client jobsAPI, filter hopper.DeadFilter, l *listFlags, olderThan string) error {
	var flags []string
	add := func(name, v string) {
		if v != "" {
			flags = append(flags, "--"+name+" "+shellQuote(v))
		}
	}
	add("kind", l.kind)
	add("queue", l.queue)
	add("older-than", olderThan)
	states := filterStates(filter)
	msg := "nothing to retry: no " + joinStates(states, " or ") + " job"
	if len(flags) > 0 {
		msg += " matches " + strings.Join(flags, " ")
	}
	var others []jobs.State
	for _, s := range inDeadTable {
		if !hasState(states, s) {
			others = append(others, s)
		}
	}
	if len(others) > 0 {
		// Stats counts by queue and kind, not by age: with --older-than
		// the count bounds what matches, so it is not said.
		other := hopper.DeadFilter{Queue: filter.Queue, Kind: filter.Kind, States: others}
		n, err := deadCount(e, client, other)
		if err != nil {
			return err
		}
		name := joinStates(others, " or ")
		switch {
		case n == 0:
		case filter.All:
			msg += fmt.Sprintf(" (%s: add --state %s)", plural(n, name+" job"), name)
		case olderThan != "":
			msg += fmt.Sprintf(" (%s jobs are retried with --state %s)", name, name)
		case n == 1:
			msg += fmt.Sprintf(" (1 %s job does: add --state %s)", name, name)
		default:
			msg += fmt.Sprintf(" (%s do: add --state %s)", plural(n, name+" job"), name)
		}
	}
	fmt.Fprintln(e.stdout, msg)
	return nil
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
