package cli

import (
	"errors"
	"flag"
	"fmt"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/jobs"
)

// cancelJobs is hopper jobs cancel: it cancels the jobs of ids, pending,
// scheduled and running ones (their workers stop them), each kept as
// cancelled in the dead table, and reports each id.
func cancelJobs(e *env, client jobsAPI, ids []int64) error {
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
}

// onlyConnectionFlags fails when a flag other than --database-url,
// --schema and --sharded was given to an action that takes none of the command's
// others (jobs cancel takes ids, not the filters of jobs list).
func onlyConnectionFlags(fs *flag.FlagSet, action, takes string) error {
	var extra string
	fs.Visit(func(f *flag.Flag) {
		if f.Name != "database-url" && f.Name != "schema" && f.Name != "sharded" && extra == "" {
			extra = f.Name
		}
	})
	if extra != "" {
		return fmt.Errorf("%w: %s takes %s, not --%s", errUsage, action, takes, extra)
	}
	return nil
}
