package cli

import (
	"fmt"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/jobs"
)

// purgeDead deletes, for good, the dead jobs filter chooses. A filter that
// chooses jobs by what they are (--kind, --queue, --older-than, --all)
// may reach thousands, so it asks first, as hopper queues purge and hopper
// migrate down do, unless yes; ids name each job already and ask nothing.
func purgeDead(e *env, client jobsAPI, filter hopper.DeadFilter, olderThan string, yes bool) error {
	if !yes && len(filter.IDs) == 0 {
		n, err := deadCount(e, client, filter)
		if err != nil {
			return err
		}
		states := joinStates(filterStates(filter), " or ")
		where := deadWhere(filter)
		if n == 0 {
			fmt.Fprintf(e.stdout, "nothing to purge: no %s jobs%s\n", states, where)
			return nil
		}
		question := fmt.Sprintf("Delete %s%s for good? [y/N] ", plural(n, states+" job"), where)
		switch {
		case filter.All:
			question = fmt.Sprintf("Delete all %s for good? [y/N] ", plural(n, states+" job"))
		case olderThan != "":
			// The count is by queue and kind (what Stats reads), not by
			// age: it bounds what --older-than leaves.
			question = fmt.Sprintf("Delete up to %s%s (those that ended more than %s ago) for good? [y/N] ",
				plural(n, states+" job"), where, olderThan)
		}
		if err := confirm(e, question, "deleted", false); err != nil {
			return err
		}
	}
	n, err := client.PurgeDeadJobs(e.ctx, filter)
	fmt.Fprintf(e.stdout, "purged %s\n", plural(n, "job"))
	return err
}

// deadCount counts the jobs of the dead table in filter's states, queue
// and kind, with the counts hopper stats shows: no statement of its own.
func deadCount(e *env, client jobsAPI, filter hopper.DeadFilter) (int64, error) {
	stats, err := client.GetStats(e.ctx)
	if err != nil {
		return 0, err
	}
	states := filterStates(filter)
	var n int64
	for _, r := range stats.Rows {
		if (filter.Queue != "" && r.Queue != filter.Queue) || (filter.Kind != "" && r.Kind != filter.Kind) {
			continue
		}
		if hasState(states, jobs.StateDead) {
			n += r.Dead
		}
		if hasState(states, jobs.StateCancelled) {
			n += r.Cancelled
		}
	}
	return n, nil
}

// deadWhere says which queue and kind filter keeps, for a question.
func deadWhere(filter hopper.DeadFilter) string {
	switch {
	case filter.Queue != "" && filter.Kind != "":
		return fmt.Sprintf(" of queue %q and kind %q", filter.Queue, filter.Kind)
	case filter.Queue != "":
		return fmt.Sprintf(" of queue %q", filter.Queue)
	case filter.Kind != "":
		return fmt.Sprintf(" of kind %q", filter.Kind)
	}
	return ""
}
