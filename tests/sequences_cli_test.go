package tests

import (
	"context"
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
)

type SequenceStep struct {
	N int `json:"n"`
}

var sequenceStep = jobs.MustDefine[SequenceStep]("sequence_step", jobs.Defaults(jobs.Queue("ledger"), jobs.MaxAttempts(1)))

// sequencesBed is a schema whose sequences the test builds with the Go
// API: jobs enqueued to a key, and a head cancelled to block it.
type sequencesBed struct {
	t      *testing.T
	ctx    context.Context
	d      *testdb.DB
	client *hopper.Client
}

func newSequencesBed(t *testing.T) *sequencesBed {
	t.Helper()
	t.Parallel()
	d := testdb.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return &sequencesBed{t: t, ctx: ctx, d: d, client: hopper.NewClient(d.Pool)}
}

// enqueue puts n jobs in the sequence key and returns their ids, the head
// first.
func (b *sequencesBed) enqueue(key string, n int) []int64 {
	b.t.Helper()
	ids := make([]int64, n)
	for i := range n {
		res, err := sequenceStep.Enqueue(b.ctx, b.d.Pool, SequenceStep{N: i}, jobs.Sequence(key))
		require.NoError(b.t, err)
		ids[i] = res.ID
	}
	return ids
}

// blocked puts n jobs in the sequence key and cancels the head, which
// blocks the sequence; it returns the ids, the head first.
func (b *sequencesBed) blocked(key string, n int) []int64 {
	b.t.Helper()
	ids := b.enqueue(key, n)
	require.NoError(b.t, b.client.CancelJob(b.ctx, ids[0]))
	info, err := b.client.GetSequence(b.ctx, key)
	require.NoError(b.t, err)
	require.NotNil(b.t, info.Blocked, "cancelling the head blocks %s", key)
	return ids
}

func (b *sequencesBed) state(id int64) jobs.State {
	b.t.Helper()
	row, err := b.client.GetJob(b.ctx, id)
	require.NoError(b.t, err)
	return row.State
}

func (b *sequencesBed) run(stdin string, args ...string) result {
	b.t.Helper()
	return runHopper(b.t, b.d.URL, stdin, args...)
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// TestCLISequencesList: hopper sequences list shows the blocked sequences
// in key order (key, the head that blocks it, queue, kind, state, reason,
// when, how many wait), not those that run; a full page ends with the
// command that lists the next; --json prints the same with snake_case
// keys.
func TestCLISequencesList(t *testing.T) {
	b := newSequencesBed(t)
	r := b.run("", "sequences", "list")
	require.Zero(t, r.code, r.stderr)
	require.Equal(t, "(no blocked sequences)\n", r.stdout)
	r = b.run("", "sequences", "list", "--json")
	require.Zero(t, r.code, r.stderr)
	require.JSONEq(t, `{"sequences":[]}`, r.stdout)

	acct1 := b.blocked("acct-1", 3)
	acct2 := b.blocked("acct 2", 1) // bytewise before acct-1
	b.enqueue("acct-3", 2)          // runs: not blocked

	r = b.run("", "sequences", "list")
	require.Zero(t, r.code, r.stderr)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 3, r.stdout)
	require.Regexp(t, `^KEY\s+HEAD\s+QUEUE\s+KIND\s+STATE\s+REASON\s+BLOCKED AT\s+WAITING$`, lines[0])
	stampRe := `\d{4}-\d\d-\d\d \d\d:\d\d:\d\d`
	require.Regexp(t, `^acct 2\s+`+itoa(acct2[0])+`\s+ledger\s+sequence_step\s+cancelled\s+.*\s+`+stampRe+`\s+0$`, lines[1])
	require.Regexp(t, `^acct-1\s+`+itoa(acct1[0])+`\s+ledger\s+sequence_step\s+cancelled\s+.*\s+`+stampRe+`\s+2$`, lines[2])
	require.NotContains(t, r.stdout, "more:")

	// Pages: a full one says how to list the next, the last one does not.
	r = b.run("", "sequences", "list", "--limit", "1")
	require.Zero(t, r.code, r.stderr)
	lines = strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 3, r.stdout)
	require.Regexp(t, `^acct 2\s`, lines[1])
	require.Equal(t, "more: hopper sequences list --after 'acct 2' --limit 1", lines[2])
	r = b.run("", "sequences", "list", "--after", "acct 2", "--limit", "1")
	require.Zero(t, r.code, r.stderr)
	lines = strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 2, r.stdout)
	require.Regexp(t, `^acct-1\s`, lines[1])
	r = b.run("", "sequences", "list", "--after", "acct-1")
	require.Zero(t, r.code, r.stderr)
	require.Equal(t, "(no blocked sequences)\n", r.stdout)

	r = b.run("", "sequences", "list", "--json", "--limit", "1")
	require.Zero(t, r.code, r.stderr)
	seen := requireSnakeCase(t, "sequences list", r.stdout)
	for _, k := range []string{".sequences", ".next", ".sequences[].key", ".sequences[].job_id", ".sequences[].queue", ".sequences[].kind",
		".sequences[].state", ".sequences[].reason", ".sequences[].blocked_at", ".sequences[].waiting", ".sequences[].waiting_capped"} {
		require.True(t, seen[k], "no %s in %v", k, seen)
	}
	var page struct {
		Sequences []struct {
			Key           string     `json:"key"`
			JobID         int64      `json:"job_id"`
			Queue         string     `json:"queue"`
			Kind          string     `json:"kind"`
			State         jobs.State `json:"state"`
			Reason        string     `json:"reason"`
			BlockedAt     time.Time  `json:"blocked_at"`
			Waiting       int64      `json:"waiting"`
			WaitingCapped bool       `json:"waiting_capped"`
		} `json:"sequences"`
		Next string `json:"next"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &page))
	require.Len(t, page.Sequences, 1)
	require.Equal(t, "acct 2", page.Next)
	s := page.Sequences[0]
	require.Equal(t, "acct 2", s.Key)
	require.Equal(t, acct2[0], s.JobID)
	require.Equal(t, "ledger", s.Queue)
	require.Equal(t, "sequence_step", s.Kind)
	require.Equal(t, jobs.StateCancelled, s.State)
	require.WithinDuration(t, time.Now(), s.BlockedAt, time.Minute)
	require.Zero(t, s.Waiting)
	require.False(t, s.WaitingCapped)
	r = b.run("", "sequences", "list", "--json")
	require.Zero(t, r.code, r.stderr)
	page.Sequences, page.Next = nil, ""
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &page))
	require.Len(t, page.Sequences, 2)
	require.Empty(t, page.Next, "the last page")
	require.Equal(t, int64(2), page.Sequences[1].Waiting)

	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"sequences", "list", "--limit", "0"}, "--limit 0 is outside 1 to 1000"},
		{[]string{"sequences", "list", "--limit", "1001"}, "--limit 1001 is outside 1 to 1000"},
		{[]string{"sequences", "list", "acct-1"}, "list takes no argument"},
		{[]string{"sequences", "list", "--yes"}, "--yes is for skip, not list"},
	} {
		requireFailure(t, b.run("", tc.args...), 2, tc.says)
	}
}

// TestCLISequencesShow: hopper sequences show prints a sequence's head,
// its block (the head that ended, and the commands that retry or skip it)
// and how many wait; a blocked sequence's head is the job that blocks it;
// a key no live job has and no block holds is unknown (exit 1, as an
// unknown workflow).
func TestCLISequencesShow(t *testing.T) {
	b := newSequencesBed(t)
	blocked := b.blocked("acct-1", 3)
	running := b.enqueue("acct-3", 2)

	r := b.run("", "sequences", "show", "acct-1")
	require.Zero(t, r.code, r.stderr)
	require.Regexp(t, `^sequence acct-1\nhead: job `+itoa(blocked[0])+` \(cancelled, blocking\)\nblocked: by job `+itoa(blocked[0])+`, cancelled at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d(: .+)?\n`+
		regexp.QuoteMeta(`  hopper sequences retry acct-1 runs it again; hopper sequences skip acct-1 lets the next job run`)+`\nwaiting: 2 jobs\n$`, r.stdout)

	r = b.run("", "sequences", "show", "acct-3")
	require.Zero(t, r.code, r.stderr)
	require.Equal(t, "sequence acct-3\nhead: job "+itoa(running[0])+" (pending)\nblocked: no\nwaiting: 1 job\n", r.stdout)
	r = b.run("", "sequences", "show", "nobody")
	requireFailure(t, r, 1, "hopper sequences: no sequence nobody: no live job has this key and it is not blocked "+
		"(never enqueued, or its jobs all finished; hopper sequences list shows the blocked ones)")
	require.Empty(t, r.stdout)
	requireFailure(t, b.run("", "sequences", "show", "nobody", "--json"), 1, "no sequence nobody")

	r = b.run("", "sequences", "show", "acct-1", "--json")
	require.Zero(t, r.code, r.stderr)
	seen := requireSnakeCase(t, "sequences show", r.stdout)
	for _, k := range []string{".key", ".blocked", ".blocked.job_id", ".blocked.state", ".blocked.blocked_at", ".waiting", ".waiting_capped"} {
		require.True(t, seen[k], "no %s in %v", k, seen)
	}
	var show struct {
		Key     string `json:"key"`
		HeadID  int64  `json:"head_id"`
		Blocked *struct {
			JobID int64      `json:"job_id"`
			State jobs.State `json:"state"`
		} `json:"blocked"`
		Waiting int64 `json:"waiting"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &show))
	require.Equal(t, "acct-1", show.Key)
	require.Zero(t, show.HeadID)
	require.NotNil(t, show.Blocked)
	require.Equal(t, blocked[0], show.Blocked.JobID)
	require.Equal(t, jobs.StateCancelled, show.Blocked.State)
	require.Equal(t, int64(2), show.Waiting)

	r = b.run("", "sequences", "show", "acct-3", "--json")
	require.Zero(t, r.code, r.stderr)
	require.JSONEq(t, `{"key":"acct-3","head_id":`+itoa(running[0])+`,"head_state":"pending","blocked":null,"waiting":1,"waiting_capped":false}`, r.stdout)

	requireFailure(t, b.run("", "sequences", "show"), 2, "show takes one sequence key")
	requireFailure(t, b.run("", "sequences", "show", ""), 2, "show takes one sequence key, not an empty one")
	requireFailure(t, b.run("", "sequences", "show", "a", "b"), 2, "show takes one sequence key")
	requireFailure(t, b.run("", "sequences", "show", "acct-1", "--limit", "3"), 2, "--limit is for list, not show")
}

// TestCLISequencesRetry: hopper sequences retry runs a blocked sequence's
// head again, first; a sequence that is not blocked is a clear error
// (exit 1), and so is a head purged from the dead table, which skip
// lets pass.
func TestCLISequencesRetry(t *testing.T) {
	b := newSequencesBed(t)
	ids := b.blocked("acct-1", 3)
	running := b.enqueue("acct-3", 1)

	r := b.run("", "sequences", "retry", "acct-3")
	requireFailure(t, r, 1, "hopper sequences: sequence acct-3 is not blocked: nothing retried (hopper sequences show acct-3 shows it)")
	require.Empty(t, r.stdout)
	require.Equal(t, jobs.StatePending, b.state(running[0]))

	r = b.run("", "sequences", "retry", "acct-1")
	require.Zero(t, r.code, r.stderr)
	require.Equal(t, "sequence acct-1: job "+itoa(ids[0])+" runs again as its head; the jobs behind it follow once it succeeds\n", r.stdout)
	require.Equal(t, jobs.StatePending, b.state(ids[0]))
	require.Equal(t, jobs.StateWaiting, b.state(ids[1]))
	require.Equal(t, jobs.StateWaiting, b.state(ids[2]))
	r = b.run("", "sequences", "list")
	require.Zero(t, r.code, r.stderr)
	require.Equal(t, "(no blocked sequences)\n", r.stdout, "the block is lifted")
	requireFailure(t, b.run("", "sequences", "retry", "acct-1"), 1, "sequence acct-1 is not blocked: nothing retried")

	// A head purged from the dead table cannot run again: skip it.
	gone := b.blocked("acct-9", 2)
	n, err := b.client.PurgeDeadJobs(b.ctx, hopper.DeadFilter{IDs: gone[:1], States: []jobs.State{jobs.StateCancelled}})
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
	requireFailure(t, b.run("", "sequences", "retry", "acct-9"), 1,
		"hopper sequences: sequence acct-9: its head, job "+itoa(gone[0])+", is no longer in the dead table (purged, or retried meanwhile): "+
			"nothing retried (hopper sequences skip acct-9 lets the next job run)")
	r = b.run("", "sequences", "skip", "acct-9", "--yes")
	require.Zero(t, r.code, r.stderr)
	require.Equal(t, "sequence acct-9: job "+itoa(gone[0])+" skipped; job "+itoa(gone[1])+" runs next\n", r.stdout)
	require.Equal(t, jobs.StatePending, b.state(gone[1]))

	requireFailure(t, b.run("", "sequences", "retry"), 2, "retry takes one sequence key")
	requireFailure(t, b.run("", "sequences", "retry", "acct-1", "--yes"), 2, "--yes is for skip, not retry")
	requireFailure(t, b.run("", "sequences", "rety", "acct-1"), 2, `unknown sequences action "rety"`)
}

// TestCLISequencesSkip: hopper sequences skip lets the job behind a
// blocked head run, the head left as it ended, after a question (skipped
// by --yes); no answer, or another than y, skips nothing; a sequence that
// is not blocked is a clear error, asked nothing.
func TestCLISequencesSkip(t *testing.T) {
	b := newSequencesBed(t)
	ids := b.blocked("acct-1", 3)
	question := "Skip job " + itoa(ids[0]) + " (cancelled) of sequence acct-1? It stays cancelled and does not run again; " +
		"the next of the 2 jobs waiting runs now. [y/N] "

	r := b.run("", "sequences", "skip", "acct-1")
	require.Equal(t, 1, r.code, r.stderr)
	require.Equal(t, question+"\n", r.stdout)
	require.Equal(t, "hopper sequences: not confirmed: no answer on stdin; nothing skipped (pass --yes to skip the question)\n", r.stderr)
	r = b.run("n\n", "sequences", "skip", "acct-1")
	require.Equal(t, 1, r.code, r.stderr)
	require.Equal(t, question, r.stdout)
	require.Equal(t, "hopper sequences: not confirmed; nothing skipped (pass --yes to skip the question)\n", r.stderr)
	require.Equal(t, jobs.StateWaiting, b.state(ids[1]), "refused: nothing skipped")

	r = b.run("y\n", "sequences", "skip", "acct-1")
	require.Zero(t, r.code, r.stderr)
	require.Equal(t, question+"sequence acct-1: job "+itoa(ids[0])+" skipped; job "+itoa(ids[1])+" runs next\n", r.stdout)
	require.Equal(t, jobs.StateCancelled, b.state(ids[0]), "the head stays as it ended")
	require.Equal(t, jobs.StatePending, b.state(ids[1]))
	require.Equal(t, jobs.StateWaiting, b.state(ids[2]))

	r = b.run("", "sequences", "skip", "acct-1", "--yes")
	requireFailure(t, r, 1, "hopper sequences: sequence acct-1 is not blocked: nothing skipped (hopper sequences show acct-1 shows it)")
	require.Empty(t, r.stdout, "nothing asked")

	// The last job of a sequence: nothing waits behind it.
	last := b.blocked("acct 2", 1)
	r = b.run("", "sequences", "skip", "--yes", "acct 2")
	require.Zero(t, r.code, r.stderr)
	require.Equal(t, "sequence acct 2: job "+itoa(last[0])+" skipped; no job waits behind it\n", r.stdout)
	r = b.run("", "sequences", "list")
	require.Zero(t, r.code, r.stderr)
	require.Equal(t, "(no blocked sequences)\n", r.stdout)

	requireFailure(t, b.run("", "sequences", "skip", "acct-1", "--json"), 2, "--json is for ")
}

// TestCLISequencesHelp: hopper help lists the command with its actions,
// and its --help its flags.
func TestCLISequencesHelp(t *testing.T) {
	t.Parallel()
	r := runHopper(t, "", "", "help")
	require.Zero(t, r.code)
	require.Regexp(t, `(?m)^  sequences +list\|show\|retry\|skip +`, r.stdout)
	r = runHopper(t, "", "", "sequences", "--help")
	require.Zero(t, r.code)
	require.Contains(t, r.stdout, "Usage: hopper sequences list [--after KEY] [--limit N] [--json] | show KEY [--json] | retry KEY | skip KEY [--yes]")
	for _, f := range []string{"--after", "--limit", "--json", "--yes", "--database-url", "--schema"} {
		require.Contains(t, r.stdout, "  "+f+" ")
	}
	requireFailure(t, runHopper(t, "", "", "sequences"), 2, "say list, show, retry or skip")
}

// TestCLIEnqueueSequence: hopper enqueue --sequence puts the job in a
// sequence, behind the one already there; bad input is a usage error.
func TestCLIEnqueueSequence(t *testing.T) {
	b := newSequencesBed(t)
	first := runHopper(t, b.d.URL, "", "enqueue", "--kind", "sequence_step", "--sequence", "acct", "--sequence-on-dead", "continue")
	require.Zero(t, first.code, first.stderr)
	second := runHopper(t, b.d.URL, "", "enqueue", "--kind", "sequence_step", "--sequence", "acct")
	require.Zero(t, second.code, second.stderr)
	info, err := b.client.GetSequence(b.ctx, "acct")
	require.NoError(t, err)
	require.NotZero(t, info.HeadID)
	require.EqualValues(t, 1, info.Waiting)
	head, err := b.client.GetJob(b.ctx, info.HeadID)
	require.NoError(t, err)
	require.Equal(t, "continue", head.Meta[jobs.MetaSequencePolicy])

	requireFailure(t, runHopper(t, b.d.URL, "", "enqueue", "--kind", "sequence_step", "--sequence", strings.Repeat("k", 256)), 2, "over the limit of 255")
	requireFailure(t, runHopper(t, b.d.URL, "", "enqueue", "--kind", "sequence_step", "--sequence", "acct", "--sequence-on-dead", "later"), 2, `unknown policy "later"`)
	requireFailure(t, runHopper(t, b.d.URL, "", "enqueue", "--kind", "sequence_step", "--sequence-on-dead", "continue"), 2, "--sequence-on-dead needs --sequence")
}
