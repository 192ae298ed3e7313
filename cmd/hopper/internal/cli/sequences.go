package cli

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"time"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/jobs"
)

// The page sizes of hopper sequences list: hopper.SequencePage's.
const (
	defaultSequencesLimit = 100
	maxSequencesLimit     = 1000
)

// sequenceRow is a blocked sequence, as sequences list --json prints it
// (and sequences show --json, as its block).
type sequenceRow struct {
	Key string `json:"key"`
	// JobID is the head that blocks the sequence, in the dead table.
	JobID     int64      `json:"job_id"`
	Queue     string     `json:"queue,omitempty"`
	Kind      string     `json:"kind,omitempty"`
	State     jobs.State `json:"state"`
	Reason    string     `json:"reason"`
	BlockedAt time.Time  `json:"blocked_at"`
	// Waiting counts the jobs behind it, up to 10,000: WaitingCapped says
	// the count stopped there.
	Waiting       int64 `json:"waiting"`
	WaitingCapped bool  `json:"waiting_capped"`
}

func sequenceRowOf(b hopper.BlockedSequence) sequenceRow {
	return sequenceRow{Key: b.Key, JobID: b.JobID, Queue: b.Queue, Kind: b.Kind, State: b.State, Reason: b.Reason,
		BlockedAt: b.BlockedAt, Waiting: b.Waiting, WaitingCapped: b.WaitingCapped}
}

// sequencesPage is what sequences list --json prints: the blocked
// sequences, and the key to pass as --after for the next page ("" on the
// last).
type sequencesPage struct {
	Sequences []sequenceRow `json:"sequences"`
	Next      string        `json:"next,omitempty"`
}

// sequenceReport is what sequences show --json prints.
type sequenceReport struct {
	Key string `json:"key"`
	// HeadID is the job whose turn it is (pending, scheduled or running),
	// absent when none; Blocked is the block holding the sequence, null
	// when none.
	HeadID        int64        `json:"head_id,omitempty"`
	HeadState     jobs.State   `json:"head_state,omitempty"`
	Blocked       *sequenceRow `json:"blocked"`
	Waiting       int64        `json:"waiting"`
	WaitingCapped bool         `json:"waiting_capped"`
}

func sequencesCommand() *command {
	var asJSON, yes bool
	var after string
	var limit int
	actions := []string{"list", "show", "retry", "skip"}
	return &command{
		name:    "sequences",
		actions: actions,
		args:    "list [--after KEY] [--limit N] [--json] | show KEY [--json] | retry KEY | skip KEY [--yes]",
		summary: "sequences whose head ended dead or cancelled and holds the jobs behind it: list the blocked ones, show one; " +
			"retry runs the head again, skip lets the next job run (asks first unless --yes)",
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&after, "after", "", "list: the page after this key (printed at the end of a full page)")
			fs.IntVar(&limit, "limit", defaultSequencesLimit, fmt.Sprintf("list: at most this many, in key order (1 to %d)", maxSequencesLimit))
			fs.BoolVar(&asJSON, "json", false, "list, show: print JSON")
			fs.BoolVar(&yes, "yes", false, "skip: do not ask for confirmation")
		},
		run: func(e *env, fs *flag.FlagSet, args []string) error {
			action, rest, err := pickAction("sequences", args, actions...)
			if err != nil {
				return err
			}
			switch {
			case action == "list" && len(rest) > 0:
				return fmt.Errorf("%w: list takes no argument (hopper sequences show KEY shows one)", errUsage)
			case action != "list" && len(rest) != 1:
				return fmt.Errorf("%w: %s takes one sequence key (hopper sequences list shows the blocked ones)", errUsage, action)
			case action != "list" && rest[0] == "":
				return fmt.Errorf("%w: %s takes one sequence key, not an empty one", errUsage, action)
			case action == "list" && (limit < 1 || limit > maxSequencesLimit):
				return fmt.Errorf("%w: --limit %d is outside 1 to %d", errUsage, limit, maxSequencesLimit)
			}
			if err := actionFlags(fs, action, map[string][]string{
				"list": {"after", "limit", "json"}, "show": {"json"}, "retry": {}, "skip": {"yes"},
			}); err != nil {
				return err
			}
			client, done, err := e.connectClient()
			if err != nil {
				return err
			}
			defer done()
			switch action {
			case "list":
				return listSequences(e, client, after, limit, asJSON)
			case "show":
				return showSequence(e, client, rest[0], asJSON)
			case "retry":
				return retrySequence(e, client, rest[0])
			}
			return skipSequence(e, client, rest[0], yes)
		},
	}
}

// waitingCount is how many jobs wait, "10000+" when the count stopped.
func waitingCount(n int64, capped bool) string {
	if capped {
		return strconv.FormatInt(n, 10) + "+"
	}
	return strconv.FormatInt(n, 10)
}

// listSequences prints a page of blocked sequences, and the command that
// prints the next one when there is one.
func listSequences(e *env, client *hopper.Client, after string, limit int, asJSON bool) error {
	list, err := client.ListBlockedSequences(e.ctx, hopper.SequencePage{After: after, Limit: limit})
	if err != nil {
		return err
	}
	next := ""
	if len(list) == limit {
		// A full page: whether another follows is one key away.
		last := list[len(list)-1].Key
		more, err := client.ListBlockedSequences(e.ctx, hopper.SequencePage{After: last, Limit: 1})
		if err != nil {
			return err
		}
		if len(more) > 0 {
			next = last
		}
	}
	if asJSON {
		page := sequencesPage{Sequences: make([]sequenceRow, len(list)), Next: next}
		for i, b := range list {
			page.Sequences[i] = sequenceRowOf(b)
		}
		return json.NewEncoder(e.stdout).Encode(page)
	}
	err = printTable(e.stdout, "blocked sequences", "KEY\tHEAD\tQUEUE\tKIND\tSTATE\tREASON\tBLOCKED AT\tWAITING", list, func(b hopper.BlockedSequence) string {
		return fmt.Sprintf("%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s", b.Key, b.JobID, b.Queue, b.Kind, b.State, oneLine(b.Reason),
			stamp(b.BlockedAt), waitingCount(b.Waiting, b.WaitingCapped))
	})
	if err != nil {
		return err
	}
	if next != "" {
		again := "sequences list --after " + shellQuote(next)
		if limit != defaultSequencesLimit {
			again += " --limit " + strconv.Itoa(limit)
		}
		fmt.Fprintf(e.stdout, "more: %s\n", e.commandLine(again))
	}
	return nil
}

// showSequence prints one sequence: its head, its block, how many wait.
// A key with no live job and no block is unknown, an error as an unknown
// workflow is: whether it never had a job or its jobs all finished, there
// is nothing to show.
func showSequence(e *env, client *hopper.Client, key string, asJSON bool) error {
	info, err := client.GetSequence(e.ctx, key)
	if err != nil {
		return err
	}
	if info.HeadID == 0 && info.Blocked == nil && info.Waiting == 0 {
		return fmt.Errorf("no sequence %s: no live job has this key and it is not blocked (never enqueued, or its jobs all finished; "+
			"hopper sequences list shows the blocked ones)", shellQuote(key))
	}
	if asJSON {
		r := sequenceReport{Key: info.Key, HeadID: info.HeadID, HeadState: info.HeadState, Waiting: info.Waiting, WaitingCapped: info.WaitingCapped}
		if info.Blocked != nil {
			row := sequenceRowOf(*info.Blocked)
			r.Blocked = &row
		}
		return json.NewEncoder(e.stdout).Encode(r)
	}
	fmt.Fprintf(e.stdout, "sequence %s\n", key)
	switch {
	case info.HeadID != 0:
		fmt.Fprintf(e.stdout, "head: job %d (%s)\n", info.HeadID, info.HeadState)
	case info.Blocked != nil:
		// The dead or cancelled job is the head: the sequence waits on it.
		fmt.Fprintf(e.stdout, "head: job %d (%s, blocking)\n", info.Blocked.JobID, info.Blocked.State)
	default:
		fmt.Fprintln(e.stdout, "head: none")
	}
	if b := info.Blocked; b != nil {
		fmt.Fprintf(e.stdout, "blocked: by job %d, %s at %s", b.JobID, b.State, stamp(b.BlockedAt))
		if b.Reason != "" {
			fmt.Fprintf(e.stdout, ": %s", oneLine(b.Reason))
		}
		fmt.Fprintln(e.stdout)
		fmt.Fprintf(e.stdout, "  %s runs it again; %s lets the next job run\n",
			e.commandLine("sequences retry "+shellQuote(key)), e.commandLine("sequences skip "+shellQuote(key)))
	} else {
		fmt.Fprintln(e.stdout, "blocked: no")
	}
	fmt.Fprintf(e.stdout, "waiting: %s\n", waitingJobs(info.Waiting, info.WaitingCapped))
	return nil
}

// waitingJobs says "3 jobs", "1 job", "10000+ jobs".
func waitingJobs(n int64, capped bool) string {
	if capped {
		return waitingCount(n, capped) + " jobs"
	}
	return plural(n, "job")
}

// notBlocked is the one line for a sequence that retry or skip cannot
// act on.
func notBlocked(key, nothing string) error {
	return fmt.Errorf("sequence %s is not blocked: nothing %s (hopper sequences show %s shows it)", key, nothing, shellQuote(key))
}

// retrySequence runs a blocked sequence's head again.
func retrySequence(e *env, client *hopper.Client, key string) error {
	id, err := client.RetrySequence(e.ctx, key)
	switch {
	case errors.Is(err, hopper.ErrNotBlocked):
		return notBlocked(key, "retried")
	case errors.Is(err, hopper.ErrNotFound):
		head := "its head"
		if info, ierr := client.GetSequence(e.ctx, key); ierr == nil && info.Blocked != nil {
			head = fmt.Sprintf("its head, job %d,", info.Blocked.JobID)
		}
		return fmt.Errorf("sequence %s: %s is no longer in the dead table (purged, or retried meanwhile): nothing retried "+
			"(hopper sequences skip %s lets the next job run)", key, head, shellQuote(key))
	case err != nil:
		return err
	}
	fmt.Fprintf(e.stdout, "sequence %s: job %d runs again as its head; the jobs behind it follow once it succeeds\n", key, id)
	return nil
}

// skipSequence lifts a sequence's block without running its head again,
// asking first unless yes: the head is not run, and the next job runs
// before it.
func skipSequence(e *env, client *hopper.Client, key string, yes bool) error {
	info, err := client.GetSequence(e.ctx, key)
	if err != nil {
		return err
	}
	b := info.Blocked
	if b == nil {
		return notBlocked(key, "skipped")
	}
	if !yes {
		next := "no job waits behind it"
		if info.Waiting > 0 {
			next = "the next of the " + waitingJobs(info.Waiting, info.WaitingCapped) + " waiting runs now"
		}
		question := fmt.Sprintf("Skip job %d (%s) of sequence %s? It stays %s and does not run again; %s. [y/N] ",
			b.JobID, b.State, key, b.State, next)
		if err := confirm(e, question, "skipped", false); err != nil {
			return err
		}
	}
	promoted, err := client.SkipSequence(e.ctx, key)
	switch {
	case errors.Is(err, hopper.ErrNotBlocked):
		return fmt.Errorf("sequence %s is no longer blocked (retried or skipped meanwhile): nothing skipped (hopper sequences show %s shows it)", key, shellQuote(key))
	case err != nil:
		return err
	case promoted == 0:
		fmt.Fprintf(e.stdout, "sequence %s: job %d skipped; no job waits behind it\n", key, b.JobID)
	default:
		fmt.Fprintf(e.stdout, "sequence %s: job %d skipped; job %d runs next\n", key, b.JobID, promoted)
	}
	return nil
}
