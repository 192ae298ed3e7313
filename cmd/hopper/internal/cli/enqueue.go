package cli

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/hopperq/hopper/jobs"
)

func enqueueCommand() *command {
	var (
		kind, payload, queue, uniqueKey, runAt, key string
		sequence, sequencePolicy                    string
		priority, maxAttempts, version              int
		delay                                       time.Duration
		meta                                        jobs.Meta
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
			durationVar(fs, &delay, "delay", 0, "run no earlier than this long from now (e.g. 90s, 2h, 2d)")
			fs.StringVar(&runAt, "run-at", "", "run no earlier than this RFC 3339 time (2026-11-22T15:04:05Z), or this long from now (10m)")
			fs.StringVar(&uniqueKey, "unique-key", "", "skip if a live job holds this key")
			fs.StringVar(&key, "concurrency-key", "", "the job's concurrency key (flow control: per-key limits, fairness)")
			fs.StringVar(&sequence, "sequence", "", "the job's sequence key: jobs of a key run one at a time, in order")
			fs.StringVar(&sequencePolicy, "sequence-on-dead", "", "with --sequence: block (the default) or continue, when the job ends dead or cancelled")
			fs.IntVar(&version, "version", 1, "payload version")
			fs.IntVar(&maxAttempts, "max-attempts", jobs.DefaultMaxAttempts, "attempts before the job is dead")
			fs.Func("meta", "metadata tag KEY=VALUE (repeat for more)", func(kv string) error {
				k, v, ok := strings.Cut(kv, "=")
				if !ok || k == "" {
					return fmt.Errorf("want KEY=VALUE, not %q", kv)
				}
				if meta == nil {
					meta = jobs.Meta{}
				}
				meta[k] = v
				return nil
			})
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
			if key != "" {
				opts = append(opts, jobs.ConcurrencyKey(key))
			}
			if uniqueKey != "" {
				opts = append(opts, jobs.UniqueKey(uniqueKey))
			}
			if sequencePolicy != "" && sequence == "" {
				return fmt.Errorf("%w: --sequence-on-dead needs --sequence", errUsage)
			}
			if sequence != "" {
				opts = append(opts, jobs.Sequence(sequence), jobs.SequenceOnDead(jobs.SequencePolicy(sequencePolicy)))
			}
			if meta != nil {
				opts = append(opts, jobs.Metadata(meta))
			}
			pool, err := e.connectHopper()
			if err != nil {
				return err
			}
			defer pool.Close()
			res, err := jobs.EnqueueRaw(e.ctx, pool, kind, version, json.RawMessage(payload), opts...)
			if err != nil {
				var invalid bool
				for _, sentinel := range []error{jobs.ErrInvalidQueue, jobs.ErrInvalidPriority, jobs.ErrInvalidMaxAttempts,
					jobs.ErrInvalidRunAt, jobs.ErrInvalidUniqueKey, jobs.ErrInvalidConcurrencyKey, jobs.ErrInvalidSequenceKey, jobs.ErrInvalidDefinition, jobs.ErrPayloadTooLarge} {
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
