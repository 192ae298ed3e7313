package cli

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/jobs"
)

func enqueueCommand() *command {
	var (
		kind, payload, queue, uniqueKey, runAt string
		priority, maxAttempts, version         int
		delay                                  time.Duration
	)
	return &command{
		name:    "enqueue",
		args:    "--kind K --payload JSON [flags]",
		summary: "enqueue one job with a raw JSON payload (for operators and scripts)",
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&kind, "kind", "", "job kind (required)")
			fs.StringVar(&payload, "payload", "{}", `payload, a JSON object (e.g. {"user_id": 7})`)
			fs.StringVar(&queue, "queue", jobs.DefaultQueue, "queue")
			fs.IntVar(&priority, "priority", 0, "0 runs first, 9 last")
			fs.DurationVar(&delay, "delay", 0, "run no earlier than this long from now (e.g. 90s, 2h)")
			fs.StringVar(&runAt, "run-at", "", "run no earlier than this RFC 3339 time (2026-11-22T15:04:05Z), or this long from now (10m)")
			fs.StringVar(&uniqueKey, "unique-key", "", "skip if a live job holds this key")
			fs.IntVar(&version, "version", 1, "payload version")
			fs.IntVar(&maxAttempts, "max-attempts", jobs.DefaultMaxAttempts, "attempts before the job is dead")
		},
		run: func(e *env, _ *flag.FlagSet, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("%w: unexpected argument %q", errUsage, args[0])
			}
			if kind == "" {
				return fmt.Errorf("%w: --kind is required", errUsage)
			}
			if err := checkPayload(payload); err != nil {
				return err
			}
			if version < 1 || version > math.MaxInt32 {
				return fmt.Errorf("%w: --version must be 1 or more", errUsage)
			}
			opts := []jobs.EnqueueOption{jobs.Queue(queue), jobs.Priority(priority), jobs.Delay(delay), jobs.MaxAttempts(maxAttempts)}
			if runAt != "" {
				t, err := time.Parse(time.RFC3339, runAt)
				if err != nil {
					d, derr := parseDuration(runAt)
					if derr != nil || d < 0 {
						return fmt.Errorf("%w: --run-at wants a time like 2026-11-22T15:04:05Z (RFC 3339) or a duration like 10m, not %q", errUsage, runAt)
					}
					t = time.Now().Add(d)
				}
				opts = append(opts, jobs.RunAt(t))
			}
			if uniqueKey != "" {
				opts = append(opts, jobs.UniqueKey(uniqueKey))
			}
			pool, err := e.connectHopper()
			if err != nil {
				return err
			}
			defer pool.Close()
			res, err := jobs.EnqueueRaw(e.ctx, pool, kind, int32(version), json.RawMessage(payload), opts...)
			if err != nil {
				var invalid bool
				for _, sentinel := range []error{jobs.ErrInvalidQueue, jobs.ErrInvalidPriority, jobs.ErrInvalidMaxAttempts,
					jobs.ErrInvalidSchedule, jobs.ErrInvalidUniqueKey, jobs.ErrInvalidDefinition, jobs.ErrPayloadTooLarge} {
					invalid = invalid || errors.Is(err, sentinel)
				}
				if invalid {
					return fmt.Errorf("%w: %v", errUsage, err)
				}
				return err
			}
			if res.Duplicate {
				fmt.Fprintf(e.stdout, "duplicate: job %d holds unique key %q; nothing enqueued\n", res.ID, uniqueKey)
				return nil
			}
			fmt.Fprintf(e.stdout, "enqueued job %d\n", res.ID)
			return nil
		},
	}
}

// checkPayload accepts a JSON object, the only payload a job kind
// decodes.
func checkPayload(payload string) error {
	if !json.Valid([]byte(payload)) {
		return fmt.Errorf("%w: --payload is not valid JSON; it must be a JSON object like {\"user_id\": 7}", errUsage)
	}
	var got string
	switch strings.TrimLeft(payload, " \t\r\n")[0] {
	case '{':
		return nil
	case 'n':
		got = "null"
	case '"':
		got = "a string"
	case '[':
		got = "an array"
	case 't', 'f':
		got = "a boolean"
	default:
		got = "a number"
	}
	return fmt.Errorf("%w: --payload must be a JSON object like {\"user_id\": 7}, not %s", errUsage, got)
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
		if err != nil || id < 1 {
			return nil, fmt.Errorf("%w: %q is not a job id", errUsage, a)
		}
		ids[i] = id
	}
	return ids, nil
}

func cancelCommand() *command {
	return &command{
		name:    "cancel",
		args:    "ID...",
		summary: "remove pending jobs; running ones are reported, not cancelled",
		run: func(e *env, _ *flag.FlagSet, args []string) error {
			ids, err := parseIDs(args)
			if err != nil {
				return err
			}
			pool, err := e.connectHopper()
			if err != nil {
				return err
			}
			defer pool.Close()
			rows, err := db.New(pool).Cancel(e.ctx, ids)
			if err != nil {
				return err
			}
			failed := 0
			for _, r := range rows {
				switch r.Outcome {
				case "cancelled":
					fmt.Fprintf(e.stdout, "job %d: cancelled\n", r.ID)
				case "running":
					failed++
					fmt.Fprintf(e.stdout, "job %d: running, not cancelled (it finishes or fails on its own)\n", r.ID)
				case "dead":
					failed++
					fmt.Fprintf(e.stdout, "job %d: in the dead table, not cancelled (use hopper dead purge)\n", r.ID)
				default:
					failed++
					fmt.Fprintf(e.stdout, "job %d: no such job\n", r.ID)
				}
			}
			if failed > 0 {
				return fmt.Errorf("%d of %d jobs not cancelled", failed, len(rows))
			}
			return nil
		},
	}
}

func purgeCommand() *command {
	var queue string
	var yes bool
	return &command{
		name:    "purge",
		args:    "--queue Q [--yes]",
		summary: "remove every pending and scheduled job of a queue (running jobs finish); asks first unless --yes",
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&queue, "queue", "", "the queue to empty (required)")
			fs.BoolVar(&yes, "yes", false, "do not ask for confirmation")
		},
		run: func(e *env, _ *flag.FlagSet, args []string) error {
			if queue == "" || len(args) > 0 {
				return fmt.Errorf("%w: --queue is required and nothing else", errUsage)
			}
			pool, err := e.connectHopper()
			if err != nil {
				return err
			}
			defer pool.Close()
			q := db.New(pool)
			if !yes {
				stats, err := q.Stats(e.ctx)
				if err != nil {
					return err
				}
				var ready, scheduled int64
				for _, s := range stats {
					if s.Queue == queue {
						ready += s.Ready
						scheduled += s.Scheduled
					}
				}
				if ready+scheduled == 0 {
					fmt.Fprintf(e.stdout, "nothing to delete: queue %q has no pending or scheduled jobs\n", queue)
					return nil
				}
				fmt.Fprintf(e.stdout, "Delete %s of queue %q (%d pending, %d scheduled; running jobs finish)? [y/N] ",
					plural(ready+scheduled, "job"), queue, ready, scheduled)
				answer, _ := bufio.NewReader(e.stdin).ReadString('\n')
				if a := strings.ToLower(strings.TrimSpace(answer)); a != "y" && a != "yes" {
					return errors.New("not confirmed; nothing deleted (pass --yes to skip the question)")
				}
			}
			n, err := q.PurgeQueue(e.ctx, queue)
			if err != nil {
				return err
			}
			if n == 0 {
				fmt.Fprintf(e.stdout, "nothing to delete: queue %q has no pending or scheduled jobs\n", queue)
				return nil
			}
			fmt.Fprintf(e.stdout, "deleted %s (pending and scheduled) of queue %q\n", plural(n, "job"), queue)
			return nil
		},
	}
}

func deadCommand() *command {
	var kind, queue, olderThan string
	var limit int
	return &command{
		name:    "dead",
		args:    "list | show ID | retry ID... | retry --kind K | purge --older-than D",
		summary: "triage the dead table: list, show with error history, retry, purge",
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&kind, "kind", "", "list / retry: only this kind")
			fs.StringVar(&queue, "queue", "", "list: only this queue")
			fs.IntVar(&limit, "limit", 50, "list: at most this many, newest first")
			fs.StringVar(&olderThan, "older-than", "", "purge: jobs that died longer ago than this (e.g. 72h, 30d)")
		},
		run: func(e *env, _ *flag.FlagSet, args []string) error {
			if len(args) == 0 {
				return fmt.Errorf("%w: say list, show, retry or purge", errUsage)
			}
			action, rest := args[0], args[1:]
			var ids []int64
			var maxAge time.Duration
			switch action {
			case "list":
				if len(rest) > 0 || limit < 1 {
					return fmt.Errorf("%w: list takes no argument and a positive --limit", errUsage)
				}
			case "show":
				var err error
				if ids, err = parseIDs(rest); err != nil || len(ids) != 1 {
					return fmt.Errorf("%w: show takes one job id", errUsage)
				}
			case "retry":
				if kind == "" {
					var err error
					if ids, err = parseIDs(rest); err != nil {
						return fmt.Errorf("%w: retry takes job ids or --kind", errUsage)
					}
				} else if len(rest) > 0 {
					return fmt.Errorf("%w: retry takes job ids or --kind, not both", errUsage)
				}
			case "purge":
				var err error
				if maxAge, err = parseDuration(olderThan); err != nil || maxAge <= 0 || len(rest) > 0 {
					return fmt.Errorf("%w: purge needs --older-than with a positive duration (e.g. 72h, 30d)", errUsage)
				}
			default:
				return fmt.Errorf("%w: unknown dead action %q", errUsage, action)
			}
			pool, err := e.connectHopper()
			if err != nil {
				return err
			}
			defer pool.Close()
			q := db.New(pool)
			switch action {
			case "list":
				p := db.ListDeadParams{BeforeDiedAt: time.Now().Add(24 * time.Hour), BeforeID: math.MaxInt64, MaxJobs: int32(limit)}
				if kind != "" {
					p.Kind = &kind
				}
				if queue != "" {
					p.Queue = &queue
				}
				rows, err := q.ListDead(e.ctx, p)
				if err != nil {
					return err
				}
				tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "ID\tKIND\tQUEUE\tATTEMPTS\tDIED\tREASON")
				for _, d := range rows {
					fmt.Fprintf(tw, "%d\t%s\t%s\t%d/%d\t%s\t%s\n", d.ID, d.Kind, d.Queue, d.Attempt, d.MaxAttempts,
						d.DiedAt.Local().Format(time.DateTime), oneLine(d.Reason))
				}
				tw.Flush()
				if len(rows) == 0 {
					fmt.Fprintln(e.stdout, "(no dead jobs)")
				}
			case "show":
				d, err := q.GetDead(e.ctx, ids[0])
				if errors.Is(err, pgx.ErrNoRows) {
					return fmt.Errorf("no dead job %d", ids[0])
				}
				if err != nil {
					return err
				}
				fmt.Fprintf(e.stdout, "job %d  kind %s  queue %s  payload version %d  priority %d\n", d.ID, d.Kind, d.Queue, d.Version, d.Priority)
				fmt.Fprintf(e.stdout, "created %s  died %s  attempts %d/%d\n", d.CreatedAt.Local().Format(time.DateTime), d.DiedAt.Local().Format(time.DateTime), d.Attempt, d.MaxAttempts)
				fmt.Fprintf(e.stdout, "reason: %s\npayload: %s\nerror history:\n", d.Reason, d.Payload)
				history, err := jobs.ParseErrors(d.Errors)
				if err != nil {
					return err
				}
				for _, h := range history {
					fmt.Fprintf(e.stdout, "  attempt %d at %s by %s:\n    %s\n", h.Attempt, h.At.Local().Format(time.DateTime), h.Owner,
						strings.ReplaceAll(strings.TrimSpace(h.Error), "\n", "\n    "))
				}
			case "retry":
				var moved []int64
				if kind != "" {
					moved, err = q.RetryDeadKind(e.ctx, kind)
				} else {
					moved, err = q.RetryDead(e.ctx, ids)
				}
				if err != nil {
					return err
				}
				fmt.Fprintf(e.stdout, "retried %d jobs\n", len(moved))
				if kind == "" && len(moved) < len(ids) {
					done := map[int64]bool{}
					for _, id := range moved {
						done[id] = true
					}
					var missing []string
					for _, id := range ids {
						if !done[id] {
							missing = append(missing, strconv.FormatInt(id, 10))
						}
					}
					return fmt.Errorf("not retried (no such dead job, or a live job holds its unique key): %s", strings.Join(missing, ", "))
				}
			case "purge":
				n, err := q.PurgeDead(e.ctx, time.Now().Add(-maxAge))
				if err != nil {
					return err
				}
				fmt.Fprintf(e.stdout, "purged %d dead jobs that died more than %s ago\n", n, olderThan)
			}
			return nil
		},
	}
}
