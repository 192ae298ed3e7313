package cli

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/jobs"
)

// listFlags are the filters of every command that lists jobs (jobs list,
// dead list, history list).
type listFlags struct {
	queue, kind, states, uniqueKey, since, until, after string
	limit                                               int
	asJSON                                              bool
}

func (l *listFlags) declare(fs *flag.FlagSet, states bool) {
	fs.StringVar(&l.queue, "queue", "", "list: only this queue; edit: move the job to this queue")
	fs.StringVar(&l.kind, "kind", "", "list: only this kind")
	if states {
		fs.StringVar(&l.states, "state", "", "list: only these states, comma-separated (pending, scheduled, waiting, running, completed, dead, cancelled)")
	}
	fs.StringVar(&l.uniqueKey, "unique-key", "", "list: only jobs with this unique key")
	fs.StringVar(&l.since, "since", "", "list: only jobs created since this time (RFC 3339, or a duration ago: 2h, 7d)")
	fs.StringVar(&l.until, "until", "", "list: only jobs created before this time (RFC 3339, or a duration ago)")
	fs.IntVar(&l.limit, "limit", hopper.DefaultListLimit, fmt.Sprintf("list: at most this many, newest first (1 to %d)", hopper.MaxListLimit))
	fs.StringVar(&l.after, "after", "", "list: the page after this cursor (printed at the end of a full page)")
	fs.BoolVar(&l.asJSON, "json", false, "print JSON")
}

// params turns the flags into ListJobs parameters; fixed, when given, are
// the states the command lists (dead list, history list).
func (l *listFlags) params(fixed ...jobs.State) (hopper.ListParams, error) {
	p := hopper.ListParams{Queue: l.queue, Kind: l.kind, UniqueKey: l.uniqueKey, Limit: l.limit, After: l.after, States: fixed}
	if l.limit < 1 || l.limit > hopper.MaxListLimit {
		return p, fmt.Errorf("%w: --limit %d is outside 1 to %d", errUsage, l.limit, hopper.MaxListLimit)
	}
	if l.states != "" {
		for _, name := range strings.Split(l.states, ",") {
			name = strings.TrimSpace(name)
			s, err := jobs.ParseState(name)
			if err != nil {
				return p, fmt.Errorf("%w: --state %v%s", errUsage, strings.TrimPrefix(err.Error(), jobs.ErrInvalidState.Error()+": "),
					didYouMean(name, "", stateNames(jobs.States())))
			}
			p.States = append(p.States, s)
		}
	}
	var err error
	if p.CreatedFrom, err = parseWhen("--since", l.since); err != nil {
		return p, err
	}
	if p.CreatedTo, err = parseWhen("--until", l.until); err != nil {
		return p, err
	}
	return p, nil
}

// parseWhen reads a time flag: RFC 3339, or a duration ago ("" is zero).
func parseWhen(flagName, s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	if d, err := parseDuration(s); err == nil && d >= 0 {
		return time.Now().Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("%w: %s wants a time like 2026-11-22T15:04:05Z (RFC 3339) or a duration ago like 2h or 7d, not %q", errUsage, flagName, s)
}

// jobsPage is a page of jobs, as the listings print it with --json: the
// jobs, and the cursor of the next page ("" on the last).
type jobsPage struct {
	Jobs []jobs.Row `json:"jobs"`
	Next string     `json:"next,omitempty"`
}

// listJobs runs a listing and prints it: a table, or JSON. again is the
// command and filters that list the next page ("jobs list --queue q").
func listJobs(e *env, client jobsAPI, p hopper.ListParams, l *listFlags, again string) error {
	page, err := client.ListJobs(e.ctx, p)
	if errors.Is(err, hopper.ErrInvalidCursor) {
		return fmt.Errorf("%w: --after %q is not a cursor this command printed", errUsage, l.after)
	}
	if errors.Is(err, hopper.ErrInvalidFilter) {
		return fmt.Errorf("%w: %s", errUsage, strings.TrimPrefix(err.Error(), "hopper: list jobs: "))
	}
	if err != nil {
		return err
	}
	if l.asJSON {
		return json.NewEncoder(e.stdout).Encode(jobsPage{page.Jobs, page.Next})
	}
	if sharded, ok := client.(shardedJobs); ok {
		err = printTable(e.stdout, "jobs", "ID\tSHARD\tSTATE\tQUEUE\tKIND\tATTEMPTS\tCREATED\tDUE/ENDED\tDETAIL", page.Jobs, func(r jobs.Row) string {
			line := jobLine(r)
			id, rest, _ := strings.Cut(line, "\t")
			return id + "\t" + sharded.ShardOfID(r.ID) + "\t" + rest
		})
	} else {
		err = printJobTable(e.stdout, page.Jobs)
	}
	if err != nil {
		return err
	}
	if page.Next != "" {
		fmt.Fprintf(e.stdout, "more: %s\n", e.commandLine(again+" --after "+page.Next))
	}
	return nil
}

// printJobTable prints jobs one line each.
func printJobTable(w io.Writer, rows []jobs.Row) error {
	return printTable(w, "jobs", "ID\tSTATE\tQUEUE\tKIND\tATTEMPTS\tCREATED\tDUE/ENDED\tDETAIL", rows, jobLine)
}

// jobLine is a job's line of printJobTable.
func jobLine(r jobs.Row) string {
	when := r.RunAt
	if r.FinishedAt != nil {
		when = *r.FinishedAt
	}
	charged, allowed := r.Attempts()
	return fmt.Sprintf("%d\t%s\t%s\t%s\t%d/%d\t%s\t%s\t%s", r.ID, r.State, r.Queue, r.Kind, charged, allowed,
		stamp(r.CreatedAt), stamp(when), oneLine(detail(r)))
}

// detail is the one thing worth knowing about a job in a listing.
func detail(r jobs.Row) string {
	switch {
	case r.State == jobs.StateRunning:
		return "by " + r.LeaseOwner
	case r.Reason != "":
		return r.Reason
	case len(r.Errors) > 0:
		return "last error: " + r.Errors[len(r.Errors)-1].Error
	}
	return ""
}

func stamp(t time.Time) string { return t.Local().Format(time.DateTime) }

// printJob prints one job in full: what it is, where it is in its life,
// its payload, result and error history; with d (jobs show), its durable
// wait, progress and records too.
func printJob(w io.Writer, r jobs.Row, d *durableView) {
	fmt.Fprintf(w, "job %d  kind %s  queue %s  state %s  payload version %d  priority %d\n",
		r.ID, r.Kind, r.Queue, r.State, r.Version, r.Priority)
	charged, allowed := r.Attempts()
	uncharged := ""
	if given := r.Attempt - charged; given > 0 {
		uncharged = fmt.Sprintf(" (and %d given back uncharged)", given)
	}
	fmt.Fprintf(w, "created %s  due %s  attempts %d/%d%s\n", stamp(r.CreatedAt), stamp(r.RunAt), charged, allowed, uncharged)
	if r.FinishedAt != nil {
		fmt.Fprintf(w, "%s %s\n", endedWord(r.State), stamp(*r.FinishedAt))
	}
	if r.LeaseUntil != nil {
		fmt.Fprintf(w, "running on %s, lease until %s\n", r.LeaseOwner, r.LeaseUntil.Local().Format(time.DateTime+".000"))
	}
	if d != nil {
		d.printWait(w)
	}
	if r.UniqueKey != "" {
		fmt.Fprintf(w, "unique key: %s\n", r.UniqueKey)
	}
	if r.ConcurrencyKey != "" {
		fmt.Fprintf(w, "concurrency key: %s\n", r.ConcurrencyKey)
	}
	if r.Reason != "" {
		fmt.Fprintf(w, "reason: %s\n", r.Reason)
	}
	if len(r.Meta) > 0 {
		keys := slices.Sorted(maps.Keys(r.Meta))
		tags := make([]string, len(keys))
		for i, k := range keys {
			tags[i] = k + "=" + r.Meta[k]
		}
		fmt.Fprintf(w, "meta: %s\n", strings.Join(tags, " "))
	}
	fmt.Fprintf(w, "payload: %s\n", shownJSON(r.Payload))
	if r.Result != nil {
		fmt.Fprintf(w, "result: %s\n", shownJSON(r.Result))
	}
	if d != nil {
		d.printRecords(w)
	}
	if len(r.Errors) == 0 {
		return
	}
	fmt.Fprintln(w, "error history:")
	for _, h := range r.Errors {
		fmt.Fprintf(w, "  attempt %d at %s by %s:\n    %s\n", h.Attempt, stamp(h.At), h.Owner,
			strings.ReplaceAll(strings.TrimSpace(h.Error), "\n", "\n    "))
	}
}

// shownJSON is a stored JSON value as a person reads it: an encrypted
// one (jobs.Encrypted) is named so, with its key, rather than printed as
// the base64 of its ciphertext; the command has no key to decrypt it.
func shownJSON(raw json.RawMessage) string {
	if key, ok := jobs.EncryptedWith(raw); ok {
		return "encrypted (key " + key + ")"
	}
	return string(raw)
}

func endedWord(s jobs.State) string {
	switch s {
	case jobs.StateCompleted:
		return "completed"
	case jobs.StateCancelled:
		return "cancelled"
	}
	return "died"
}

// showJob prints the job of the one id in args, as JSON or in full, with
// what its durable handler recorded (its wait, progress and records); want,
// when given, are the states the command shows (dead show: dead and
// cancelled jobs).
func showJob(e *env, client jobsAPI, args []string, asJSON bool, want ...jobs.State) error {
	ids, err := parseOneID("show", args)
	if err != nil {
		return err
	}
	r, err := client.GetJob(e.ctx, ids[0])
	if errors.Is(err, hopper.ErrNotFound) {
		return fmt.Errorf("no job %d (never enqueued, or completed without history, or purged)", ids[0])
	}
	if err != nil {
		return err
	}
	if len(want) > 0 && !hasState(want, r.State) {
		return fmt.Errorf("job %d is %s, not %s (hopper jobs show %d shows it)", r.ID, r.State, joinStates(want, " or "), r.ID)
	}
	d, err := readDurable(e, client, r)
	if err != nil {
		return err
	}
	report := d.report(r)
	report.Shard = shardOf(client, r.ID)
	if asJSON {
		return json.NewEncoder(e.stdout).Encode(report)
	}
	if report.Shard != "" {
		fmt.Fprintf(e.stdout, "shard %s\n", report.Shard)
	}
	printJob(e.stdout, r, d)
	return nil
}

func hasState(states []jobs.State, s jobs.State) bool {
	for _, x := range states {
		if x == s {
			return true
		}
	}
	return false
}

func joinStates(states []jobs.State, sep string) string {
	names := make([]string, len(states))
	for i, s := range states {
		names[i] = string(s)
	}
	return strings.Join(names, sep)
}

func jobsCommand() *command {
	return listShowCommand("jobs", "list jobs of every state (newest first, with filters and paging), show one in full, "+
		"cancel jobs (pending, scheduled and running ones: their workers stop them; each kept as cancelled in the dead table), "+
		"edit a job that has not started (run time, priority, queue, max attempts, payload), or delete one for good (asks first unless --yes); "+
		"wake a durable job that sleeps or awaits an event (its sleep ends, its wait times out: it runs at once)", true)
}

func historyCommand() *command {
	return listShowCommand("history", "completed jobs kept by the kinds and queues that keep history: list (newest first), or show one with its result",
		false, jobs.StateCompleted)
}

// listShowCommand is a command that lists jobs with the shared filters or
// shows one in full (hopper jobs, hopper history), and with operate
// cancels, edits, deletes and wakes jobs too; only, when given, are the states it
// lists and shows (and it then takes no --state).
func listShowCommand(name, summary string, operate bool, only ...jobs.State) *command {
	var l listFlags
	var ed editFlags
	var readFrom string
	var sharded bool
	again := name + " list"
	actions := []string{"list", "show"}
	args := "list [filters] [--json] | show ID [--json]"
	if operate {
		actions = append(actions, "cancel", "edit", "delete", "wake")
		args += " | cancel ID... | edit ID [--run-now|--run-at T] [--priority N] [--queue Q] [--max-attempts N] [--payload JSON [--version N]] [--json]" +
			" | delete ID [--yes] [--json] | wake ID"
	}
	return &command{
		name:    name,
		actions: actions,
		args:    args,
		summary: summary,
		flags: func(fs *flag.FlagSet) {
			l.declare(fs, len(only) == 0)
			declareReadURL(fs, &readFrom)
			declareSharded(fs, &sharded)
			if operate {
				ed.declare(fs)
			}
		},
		run: func(e *env, fs *flag.FlagSet, args []string) error {
			action, rest, err := pickAction(name, args, actions...)
			if err != nil {
				return err
			}
			if readFrom != "" && action != "list" && action != "show" {
				return fmt.Errorf("%w: %s changes jobs, and changes go to the primary (--database-url): --read-url is for list and show", errUsage, action)
			}
			if sharded && readFrom != "" {
				return fmt.Errorf("%w: --sharded reads the coordinator (--database-url): it takes no --read-url", errUsage)
			}
			e.sharded = sharded
			var p hopper.ListParams
			var ids []int64
			var u hopper.JobUpdate
			if action == "list" || action == "show" {
				set := given(fs)
				for _, f := range editOnly {
					if set[f] {
						return fmt.Errorf("%w: %s does not take --%s (edit and delete do)", errUsage, action, f)
					}
				}
			}
			switch action {
			case "list":
				if len(rest) > 0 {
					return fmt.Errorf("%w: list takes no argument (filters are flags)", errUsage)
				}
				if p, err = l.params(only...); err != nil {
					return err
				}
			case "edit", "delete":
				if ids, err = parseOneID(action, rest); err != nil {
					return err
				}
				if action == "delete" {
					err = onlyFlags(fs, "delete", "yes", "json")
				} else {
					u, err = ed.update(fs, l.queue)
				}
				if err != nil {
					return err
				}
			case "cancel":
				if err := onlyConnectionFlags(fs, "cancel", "job ids"); err != nil {
					return err
				}
				if ids, err = parseIDs(rest); err != nil {
					return err
				}
			case "wake":
				if err := onlyConnectionFlags(fs, "wake", "one job id"); err != nil {
					return err
				}
				if ids, err = parseOneID("wake", rest); err != nil {
					return err
				}
			}
			var client jobsAPI
			var lag *hopper.ReadLag
			var done func()
			if (action == "list" || action == "show") && !sharded { // $HOPPER_READ_URL too is for these only
				client, lag, done, err = e.connectReadClient(readFrom)
			} else {
				client, done, err = e.connectJobs()
			}
			if err != nil {
				return err
			}
			defer done()
			if lag != nil && !l.asJSON {
				fmt.Fprintf(e.stderr, "(%s)\n", lag)
			}
			switch action {
			case "show":
				return showJob(e, client, rest, l.asJSON, only...)
			case "cancel":
				return cancelJobs(e, client, ids)
			case "edit":
				return editJob(e, client, ids[0], u, l.asJSON)
			case "delete":
				return deleteJob(e, client, ids[0], ed.yes, l.asJSON)
			case "wake":
				return wakeJob(e, client, ids[0])
			}
			return listJobs(e, client, p, &l, again+flagsAgain(&l, len(only) == 0))
		},
	}
}

// flagsAgain repeats a listing's filters, for the "more:" line.
func flagsAgain(l *listFlags, states bool) string {
	var b strings.Builder
	add := func(name, v string) {
		if v != "" {
			fmt.Fprintf(&b, " --%s %s", name, shellQuote(v))
		}
	}
	add("queue", l.queue)
	add("kind", l.kind)
	if states {
		add("state", l.states)
	}
	add("unique-key", l.uniqueKey)
	add("since", l.since)
	add("until", l.until)
	if l.limit != hopper.DefaultListLimit {
		add("limit", strconv.Itoa(l.limit))
	}
	return b.String()
}

// shellQuote quotes a value for a shell when it needs it.
func shellQuote(s string) string {
	if strings.IndexFunc(s, func(r rune) bool {
		return !(r == '-' || r == '_' || r == '.' || r == ',' || r == ':' || r == '/' ||
			(r >= '0' && r <= '9') || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z'))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// plural says "1 job", "2 jobs".
func plural(n int64, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

func parseIDs(args []string) ([]int64, error) {
	if len(args) == 0 {
		return nil, fmt.Errorf("%w: give at least one job id", errUsage)
	}
	ids := make([]int64, len(args))
	for i, a := range args {
		id, err := strconv.ParseInt(a, 10, 64)
		switch {
		case errors.Is(err, strconv.ErrRange):
			return nil, fmt.Errorf("%w: %q is not a job id: too large a number", errUsage, a)
		case err != nil:
			return nil, fmt.Errorf("%w: %q is not a job id: not a number", errUsage, a)
		case id < 1:
			return nil, fmt.Errorf("%w: %q is not a job id: ids start at 1", errUsage, a)
		}
		ids[i] = id
	}
	return ids, nil
}

// stateNames are the names of states, for a "did you mean" hint.
func stateNames(states []jobs.State) []string {
	names := make([]string, len(states))
	for i, s := range states {
		names[i] = string(s)
	}
	return names
}

// parseOneID reads the one job id that action takes, saying why an
// argument is not one.
func parseOneID(action string, args []string) ([]int64, error) {
	if len(args) != 1 {
		return nil, fmt.Errorf("%w: %s takes one job id", errUsage, action)
	}
	return parseIDs(args)
}
