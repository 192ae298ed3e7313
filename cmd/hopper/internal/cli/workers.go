package cli

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hopperq/hopper"
)

// workerRow is one worker of the registry, as workers list --json prints
// it: a duration is in seconds, as in every --json output.
type workerRow struct {
	ID      string   `json:"id"`
	Host    string   `json:"host"`
	PID     int      `json:"pid"`
	Version string   `json:"version"`
	Queues  []string `json:"queues"`
	// Gone: it missed its beats (StaleAfterSeconds after LastBeatAt); else
	// it is alive. ReleasedAt: when its jobs were last handed back while
	// it was gone.
	Gone              bool       `json:"gone"`
	JobsHeld          int        `json:"jobs_held"`
	StartedAt         time.Time  `json:"started_at"`
	LastBeatAt        time.Time  `json:"last_beat_at"`
	SinceBeatSeconds  float64    `json:"since_beat_seconds"`
	StaleAfterSeconds float64    `json:"stale_after_seconds"`
	ReleasedAt        *time.Time `json:"released_at,omitempty"`
}

func workersCommand() *command {
	var asJSON, force, yes bool
	actions := []string{"list", "release"}
	return &command{
		name:    "workers",
		actions: actions,
		args:    "list [--json] | release ID [--force] [--yes]",
		summary: "the worker registry: list workers (host, pid, queues, jobs held, last beat, alive or gone); " +
			"release: hand back every job a gone worker holds (a live one's only with --force, which asks first unless --yes)",
		flags: func(fs *flag.FlagSet) {
			fs.BoolVar(&asJSON, "json", false, "list: print JSON")
			fs.BoolVar(&force, "force", false, "release: release the jobs of a worker that is still alive (each may run twice at once)")
			fs.BoolVar(&yes, "yes", false, "release --force: do not ask for confirmation")
		},
		run: func(e *env, fs *flag.FlagSet, args []string) error {
			action, rest, err := pickAction("workers", args, actions...)
			if err != nil {
				return err
			}
			switch {
			case action == "list" && len(rest) > 0:
				return fmt.Errorf("%w: list takes no argument", errUsage)
			case action == "release" && len(rest) != 1:
				return fmt.Errorf("%w: release takes one worker id (hopper workers list shows them)", errUsage)
			case action == "release" && rest[0] == "":
				return fmt.Errorf("%w: release takes one worker id, not an empty one", errUsage)
			}
			if err := actionFlags(fs, action, map[string][]string{"list": {"json"}, "release": {"force", "yes"}}); err != nil {
				return err
			}
			client, done, err := e.connectClient()
			if err != nil {
				return err
			}
			defer done()
			if action == "list" {
				return listWorkers(e, client, asJSON)
			}
			return releaseWorker(e, client, rest[0], force, yes)
		},
	}
}

// actionFlags fails when a flag of the command was given to an action
// that does not take it (workers list --force): taken, of each action,
// are the flags besides --database-url and --schema.
func actionFlags(fs *flag.FlagSet, action string, taken map[string][]string) error {
	var extra string
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "database-url" || f.Name == "schema" || extra != "" {
			return
		}
		for _, name := range taken[action] {
			if f.Name == name {
				return
			}
		}
		extra = f.Name
	})
	if extra == "" {
		return nil
	}
	// The actions that take the flag, in a fixed order: several may.
	var others []string
	for other, names := range taken {
		if slices.Contains(names, extra) {
			others = append(others, other)
		}
	}
	if len(others) > 0 {
		slices.Sort(others)
		return fmt.Errorf("%w: --%s is for %s, not %s", errUsage, extra, strings.Join(others, " and "), action)
	}
	return fmt.Errorf("%w: %s takes no --%s", errUsage, action, extra)
}

func listWorkers(e *env, client *hopper.Client, asJSON bool) error {
	list, err := client.ListWorkers(e.ctx)
	if err != nil {
		return err
	}
	if asJSON {
		rows := make([]workerRow, len(list))
		for i, w := range list {
			queues := w.Queues
			if queues == nil {
				queues = []string{}
			}
			rows[i] = workerRow{ID: w.ID, Host: w.Host, PID: w.PID, Version: w.Version, Queues: queues,
				Gone: w.Gone, JobsHeld: w.JobsHeld, StartedAt: w.StartedAt, LastBeatAt: w.LastBeat,
				SinceBeatSeconds: w.SinceBeat.Seconds(), StaleAfterSeconds: w.StaleAfter.Seconds(), ReleasedAt: w.ReleasedAt}
		}
		return json.NewEncoder(e.stdout).Encode(rows)
	}
	return printTable(e.stdout, "workers", "ID\tHOST\tPID\tQUEUES\tJOBS HELD\tLAST BEAT\tSTATE", list, func(w hopper.WorkerInfo) string {
		queues := strings.Join(w.Queues, ",")
		if queues == "" {
			queues = "(none: schedules only)"
		}
		return fmt.Sprintf("%s\t%s\t%d\t%s\t%d\t%s\t%s", w.ID, w.Host, w.PID, queues, w.JobsHeld, ago(w.SinceBeat), workerState(w))
	})
}

// workerState is "alive" or "gone", and when a gone worker's jobs were
// handed back.
func workerState(w hopper.WorkerInfo) string {
	switch {
	case !w.Gone:
		return "alive"
	case w.ReleasedAt != nil:
		return "gone (its jobs released " + stamp(*w.ReleasedAt) + ")"
	}
	return "gone"
}

// ago says how long ago something was, to the second: "4s ago",
// "2m05s ago", "3h07m ago".
func ago(d time.Duration) string {
	d = max(d, 0).Round(time.Second)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds ago", int(d.Minutes()), int(d.Seconds())%60)
	}
	return fmt.Sprintf("%dh%02dm ago", int(d.Hours()), int(d.Minutes())%60)
}

// releaseWorker is hopper workers release: the jobs of a gone worker are
// handed back at once (live workers would do it by themselves); those of
// a live one only with force, after asking unless yes, since the worker,
// if it still runs, keeps running them while they run again elsewhere.
func releaseWorker(e *env, client *hopper.Client, id string, force, yes bool) error {
	list, err := client.ListWorkers(e.ctx)
	if err != nil {
		return err
	}
	var w *hopper.WorkerInfo
	for i := range list {
		if list[i].ID == id {
			w = &list[i]
		}
	}
	if w == nil {
		return unknownWorker(id)
	}
	if !w.Gone {
		if !force {
			return fmt.Errorf("worker %s is alive (last beat %s on host %s, pid %d; %s held): nothing released. "+
				"Its jobs go back by themselves once it misses its beats (it is gone %s after its last beat); "+
				"pass --force only if you know its process is dead: if it still runs, each of its jobs may run twice at once",
				id, ago(w.SinceBeat), w.Host, w.PID, plural(int64(w.JobsHeld), "job"), w.StaleAfter.Round(time.Millisecond))
		}
		if w.JobsHeld == 0 {
			fmt.Fprintf(e.stdout, "worker %s is alive and holds no jobs: nothing to release\n", id)
			return nil
		}
		if !yes {
			question := fmt.Sprintf("Worker %s is alive (last beat %s on host %s, pid %d). Release its %s anyway? "+
				"If it still runs, it keeps running them until its next lease check while they run again elsewhere: "+
				"each may run twice at once. [y/N] ", id, ago(w.SinceBeat), w.Host, w.PID, plural(int64(w.JobsHeld), "job"))
			if err := confirm(e, question, "released", false); err != nil {
				return err
			}
		}
	}
	// Forced only when it was alive and the release confirmed: a gone
	// worker that beats again before the release keeps its jobs, --force
	// or not, since nobody was asked about a live one.
	res, err := client.ReleaseWorkerJobs(e.ctx, id, hopper.ReleaseOptions{Force: force && !w.Gone})
	switch {
	case errors.Is(err, hopper.ErrUnknownWorker):
		return unknownWorker(id)
	case errors.Is(err, hopper.ErrWorkerAlive):
		// It was gone when listed and beat since: its jobs are its own.
		return fmt.Errorf("worker %s beat again since it was listed: it is alive, nothing released (hopper workers list shows it; --force releases its jobs anyway, and each may then run twice at once)", id)
	case err != nil:
		return err
	}
	n := int64(len(res.Requeued) + len(res.Dead))
	if n == 0 {
		fmt.Fprintf(e.stdout, "worker %s holds no jobs: nothing to release\n", id)
		return nil
	}
	fmt.Fprintf(e.stdout, "worker %s: released %s: %d requeued, %d dead\n", id, plural(n, "job"), len(res.Requeued), len(res.Dead))
	if len(res.Requeued) > 0 {
		fmt.Fprintf(e.stdout, "  requeued (ready to run again, the attempt charged): %s\n", someIDs(res.Requeued))
	}
	if len(res.Dead) > 0 {
		fmt.Fprintf(e.stdout, "  dead (that was their last attempt; hopper dead retry ID runs one again): %s\n", someIDs(res.Dead))
	}
	return nil
}

// someIDs lists the first ids, and says how many more there are.
func someIDs(ids []int64) string {
	const shown = 20
	if len(ids) <= shown {
		return joinIDs(ids)
	}
	return fmt.Sprintf("%s and %d more", joinIDs(ids[:shown]), len(ids)-shown)
}

// unknownWorker is the one line for a worker id the registry does not
// hold.
func unknownWorker(id string) error {
	return fmt.Errorf("no worker %q in the registry: it never started, stopped cleanly, or was gone so long its row was pruned (hopper workers list shows the workers)", id)
}
