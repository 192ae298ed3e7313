package queries_test

import (
	"io/fs"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/queries"
)

// TestRuntimeContract guards what the Go runtime relies on in the SQL, so
// that someone editing a query gets a clear failure instead of a queue that
// silently misbehaves. The compiler already checks names, parameters and
// result types after `make generate`; this checks the rest: the sqlc
// command of each query and the clauses its guarantees rest on. The
// statements that take claims lock in id order by sorting the claims and
// locking each one's row in a LATERAL subquery driven by them ("order by
// 1) as … cross join lateral (" … "for update of j )"; see AckBatch).
func TestRuntimeContract(t *testing.T) {
	t.Parallel()
	sqlByName, cmdByName := readStatements(t)

	for _, c := range []struct {
		query, cmd string
		must       []string // each must appear (case-insensitive, whitespace-normalised)
		why        string
	}{
		{"Enqueue", ":one", []string{"on conflict (unique_key) where unique_key is not null do nothing"}, "a unique key must skip, not fail, while a live job holds it"},
		{"EnqueueBatch", ":copyfrom", nil, "plain batches go through COPY"},
		{"EnqueueBatchAt", ":copyfrom", []string{"state"}, "scheduled jobs must be stored as scheduled"},
		{"Dequeue", ":many", []string{"for update skip locked", "j.state = 'pending'", "j.run_at <= now()", "order by j.priority, j.run_at, j.id", "(j.priority, j.run_at, j.id) > (@after_priority::smallint, @after_run_at::timestamptz, @after_id::bigint)", "attempt = j.attempt + 1", "lease_until =", "not exists (select from hopper_queues as paused where paused.name = @queue::text and paused.paused_at is not null)"}, "without SKIP LOCKED two workers can claim one job; without attempt + 1 fencing breaks; without the cursor's seek (a row comparison on the ready index's columns, in its order) every claim walks the entries of jobs already claimed; without the pause check a paused queue is still worked"},
		{"DequeueQueues", ":many", []string{"for update of j skip locked", "j.state = 'pending'", "j.run_at <= now()", "order by j.priority, j.run_at, j.id", "limit want.max_jobs", "(j.priority, j.run_at, j.id) > (want.after_priority, want.after_run_at, want.after_id)", "attempt = j.attempt + 1", "lease_until =", "not exists (select from hopper_queues as paused where paused.name = want.queue and paused.paused_at is not null)"}, "each queue of a batched claim is claimed as Dequeue claims it: SKIP LOCKED, fenced, from its own cursor, up to its own slots, never from a paused queue"},
		{"AckBatch", ":many", []string{"j.attempt = acked.attempt", "j.lease_until is not null", "order by 1) as acked cross join lateral (", "for update of j )", "returning j.id, j.attempt"}, "an ack must be fenced by (id, attempt), lock in id order and say which took effect"},
		{"AckBatchKeep", ":many", []string{"j.attempt = acked.attempt", "j.lease_until is not null", "order by 1) as acked cross join lateral (", "for update of j )", "insert into hopper_job_history", "where done.keep_ms > 0", "case when part.upper_at > kept.until and part.upper_at - part.lower_at <= kept.keep then kept.until end"}, "an ack that keeps history is fenced and ordered like AckBatch, keeps the job in the same statement, and gives it a partition only where one covers its keep and is no wider than the keep"},
		{"NackBatch", ":many", []string{"j.attempt = f.attempt", "j.lease_until is not null", "order by 1) as f cross join lateral (", "for update of j )", "insert into hopper_dead_jobs", "when f.action = 'snooze' then j.errors", "max_attempts = j.max_attempts + case when failed.action = 'snooze' then 1 else 0 end", "when f.action = 'cancel' then 'cancelled'"}, "a nack must be fenced, lock in id order and dead-letter in the same statement; a snooze leaves no entry and is not charged; a cancel ends as cancelled"},
		{"Extend", ":many", []string{"j.attempt = held.attempt", "j.lease_until is not null", "for update of j skip locked", "greatest(j.lease_until,", "as extended"}, "extend must be fenced, never wait on a lock (no deadlock), never shorten a lease and report lost claims"},
		{"Release", ":many", []string{"j.attempt = held.attempt", "order by 1) as held cross join lateral (", "for update of j )", "max_attempts = j.max_attempts + 1"}, "release must be fenced, lock in id order and must not charge an attempt"},
		{"OrphanClaims", ":many", []string{"j.state = 'running'", "j.lease_until >= now() + '1 millisecond'::interval * @lease_after_ms::bigint", "j.queue = @queue::text", "j.lease_owner = @owner::text"}, "the worker hands back at once the jobs a claim whose commit's outcome is unknown took for it: only its own running jobs of the queue, leased since that claim"},
		{"ClaimFates", ":many", []string{"left join hopper_jobs", "left join hopper_dead_jobs", "left join hopper_job_history", "d.state as dead_state", "(e ->> 'attempt')::integer = c.attempt"}, "the worker settles results whose reply was lost, and tells a cancel from a lost lease, from what became of the claim"},
		{"ReleaseWorkerJobs", ":many", []string{"j.lease_owner = any (array(select gone.id from gone))", "order by j.lease_until limit @max_jobs::integer for update of j skip locked", "for update skip locked", "'attempt', j.attempt", "insert into hopper_dead_jobs", "set released_at = now()", "j.id <> all (array(select taken.id from taken))"}, "a gone worker's jobs are handed back fenced (attempt kept) and charged, in bounded batches, by one live worker at a time, and once"},
		{"Sweep", ":many", []string{"for update skip locked", "j.lease_until < now()", "limit @max_jobs::integer", "'lease expired'", "j.lease_until >= coalesce(now() - '1 millisecond'::interval * nullif(@within_ms::bigint, 0), '-infinity')"}, "sweeps run from every worker at once and must be bounded; the window lets a sweep seek past the lease-index entries of jobs long finished"},
		{"Promote", ":many", []string{"for update skip locked", "j.state = 'scheduled'", "j.run_at <= now()", "j.run_at >= coalesce(now() - '1 millisecond'::interval * nullif(@within_ms::bigint, 0), '-infinity')"}, "promotion runs from every worker at once, and seeks past the scheduled-index entries of jobs promoted long ago"},
		{"PruneHistory", ":execrows", []string{"for update skip locked", "old.keep_until < now()", "limit @max_jobs::integer", "delete from hopper_workflow_deps as d where d.child_id in (select doomed.id from doomed)"}, "every worker prunes at once, in bounded batches; a pruned workflow step's edges go with it"},
		{"PurgeDead", ":many", []string{"for update skip locked", "limit @max_jobs::integer", "d.id > @after_id::bigint", "delete from hopper_workflow_deps as e where e.child_id in (select doomed.id from doomed)"}, "dead-job retention runs from every worker at once, in bounded batches that make progress; a purged workflow step's edges go with it"},
		{"RetryDead", ":many", []string{"for update of d skip locked", "limit @max_jobs::integer", "d.id > @after_id::bigint", "least(d.attempt::bigint + d.max_attempts, 2147483647)::integer", "on conflict do nothing", "case when d.meta ? 'hopper.sequence' then 'waiting'", "pg_advisory_xact_lock(hopper_workflow_lock_id(w.workflow))", "order by p.workflow", "where (select t.taken from turns as t) >= 0"}, "a retried job keeps its fencing token, gets its attempts again without overflowing the integer, and is never lost to a unique key held again; a job of a sequence comes back waiting, for its commit to place it; the page's workflows are locked in name order before its rows, or two revivals of one workflow deadlock"},
		{"ListBlockedSequences", ":many", []string{"b.sequence_key > @after_key::text", "limit @count_limit::integer"}, "operators page through blocked sequences; the waiting count is bounded"},
		{"GetSequence", ":one", []string{"limit @count_limit::integer"}, "one sequence's head, block and bounded waiting count"},
		{"SkipSequence", ":one", []string{"hopper_sequence_skip("}, "a skip takes the key's lock and promotes the next job"},
		{"LinkWorkflow", ":one", []string{"hopper_workflow_link(@parents::bigint[], @children::bigint[])"}, "a step's edges and its count of parents (over all its stored edges) are written with it, and every parent is locked until it commits, then checked"},
		{"RetryWorkflow", ":many", []string{"hopper_workflow_retry(@workflow::text)"}, "a workflow's retry brings its failed steps back waiting and counts their parents again"},
		{"WorkflowParentCounts", ":one", []string{"d.parent_failed = 'dead'", "where d.child_id = @child_id::bigint"}, "a batch's callback counts its parents' ends in one statement, through the edges' child index, reading each failure from the edge (it outlives a purged dead row)"},
		{"Cancel", ":many", []string{"order by j.id for update of j", "order by p.id for key share of p", "insert into hopper_dead_jobs", "'cancelled'", "hopper_wake('hopper_jobs'", "cross join told"}, "a cancel keeps the job, locks in id order (no deadlock with a worker's statements), and tells the running job's worker"},
		{"UpdateJob", ":one", []string{"where j.id = @id::bigint and j.state in ('pending', 'scheduled', 'waiting') for update", "then 'durable'", "case when j.state = 'waiting' then 'waiting'", "where j.id = verdict.id and verdict.refused = ''", "exists (select from target)::boolean as locked", "hopper_wake('hopper_jobs'", "from woken left join updated"}, "an edit locks the job only while it waits and checks that under the lock, so it never changes (nor locks) a job a worker claimed; a job it makes ready wakes its queue's workers"},
		{"DeleteJob", ":one", []string{"where j.id = @id::bigint and j.state in ('pending', 'scheduled', 'waiting') and (select p.held from parents as p) >= 0 for update", "order by p.id for key share of p", "using target where j.id = target.id"}, "a delete locks the job only while it waits and checks that under the lock, so it never removes a job a worker claimed; a workflow step's parents are locked before it (no deadlock with a parent's end)"},
		{"PauseQueue", ":one", []string{"insert into hopper_queues"}, "the claim reads pauses from hopper_queues"},
		{"ResumeQueue", ":one", []string{"paused_at = null", "hopper_wake('hopper_jobs'", "cross join woken"}, "a resume wakes the queue's workers"},
		{"ReserveJobIDs", ":many", []string{"nextval(seq.id)", "as materialized"}, "COPY batches report their jobs' ids"},
		{"EnqueueBatchPlain", ":many", []string{"case when b.state = '' or (b.state = 'waiting' and b.run_at = '0001-01-01 00:00:00+00') then now() else b.run_at end", "returning id ) select id from inserted order by id"}, "a small plain batch stores what COPY stores and names its jobs' ids in its order"},
		{"LockEnqueueKeys", ":exec", []string{"pg_advisory_xact_lock(", "hashtextextended('hopper_jobs'::regclass::oid::text || ':' || k.key, 0)", "hopper_sequence_lock_id(q.key)", "order by 1"}, "locked unique modes and sequences serialize on a hash of (job table, key), freed with the transaction, all taken in one order so that batches never deadlock"},
		{"EnqueueUnique", ":one", []string{"on conflict (unique_key) where unique_key is not null do nothing", "from hopper_job_history as h", "from hopper_dead_jobs as d", "d.state = any (@states::text[])", "h.created_at > now() -", "j.state in ('pending', 'scheduled', 'waiting') and j.kind = @kind::text and not coalesce(j.meta ? 'hopper.durable', false) and (j.meta ->> 'hopper.sequence') is not distinct from (sqlc.narg(meta)::jsonb ->> 'hopper.sequence') returning j.id", "case when j.meta ? 'hopper.durable' then 'running' else j.state end as state", "holder.state = 'running' and holder.kind = @kind::text", "where not exists (select from blocking)", "set unique_key = null", "j.id = holder.id and (j.lease_until is not null or j.meta ? 'hopper.durable')", "from (select count(*) as n from taken) as t"}, "finished jobs hold a key in the states and period chosen, only a waiting holder of the same kind and sequence key that has no durable records is replaced, a running (or begun) one gives its key up before the insert checks the index, and a live one is never doubled"},
		{"EnqueueUniqueBatch", ":many", []string{"on conflict (unique_key) where unique_key is not null do nothing", "from hopper_job_history as h", "from hopper_dead_jobs as d", "where not exists (select from blocking as k where k.for_id = b.new_id)", "set unique_key = null", "cross join (select count(*) as n from taken) as t", "order by b.new_id"}, "a batch of distinct keys answers as EnqueueUnique would for each, one row per job, in order"},
		{"LockUniqueHolders", ":exec", []string{"order by j.id for update of j"}, "a batch locks the holders it may update in id order, as the worker's statements do, so that they never deadlock"},
		{"EnqueueBatchUnique", ":many", []string{"on conflict (unique_key) where unique_key is not null do nothing", "order by batch.id"}, "duplicates in a batch are skipped, and every job gets its row, in order"},
		{"Notify", ":exec", []string{"pg_notify('hopper_jobs'"}, "workers listen on hopper_jobs"},
		{"Listen", ":exec", []string{"listen hopper_jobs"}, "the channel the trigger notifies"},
		{"HopperSchema", ":one", nil, "the worker refuses to start on an unmigrated schema"},
		{"RegisterQueues", ":exec", nil, "a worker makes its queues known at start"},
		{"Stats", ":many", nil, "metrics and the CLI"},
		{"GetJob", ":one", nil, ""}, {"GetDead", ":one", nil, ""}, {"FindJob", ":one", nil, ""},
		{"ListJobs", ":many", []string{"order by a.id desc"}, "keyset pages, newest first"},
		{"ListJobsByKey", ":many", []string{"a.unique_key = @unique_key::text"}, "a search by key reads the unique_key indexes"},
		{"PurgeQueue", ":execrows", nil, ""}, {"ListQueues", ":many", nil, ""}, {"QueueKnown", ":one", nil, ""},
		{"TableActivity", ":one", nil, ""}, {"SchemaExists", ":one", nil, ""},
		{"EncryptionKeys", ":many", []string{"from hopper_jobs where payload ? 'hopper.encrypted'", "from hopper_dead_jobs where payload ? 'hopper.encrypted'",
			"from hopper_job_history where payload ? 'hopper.encrypted'", "where s.result ? 'hopper.encrypted'", "from hopper_events where payload ? 'hopper.encrypted'"},
			"an operator drops a key when no stored value names it: every table that holds payloads, records or events must be counted"},
		{"DueSchedule", ":one", []string{"for update skip locked", "s.next_fire_at <= now()", "s.triggered_at is not null", "limit 1"}, "every worker looks for due schedules at once, and each is fired by one"},
		{"AdvanceSchedule", ":execrows", []string{"s.next_fire_at = @expected_next::timestamptz", "s.triggered_at is not distinct from sqlc.narg(expected_trigger)::timestamptz"}, "a schedule moves on by compare-and-set, so a slot fires once"},
		{"DefineSchedule", ":one", []string{"hopper_schedules.definition_hash <> excluded.definition_hash", "(select mine.first_seen_at from mine) > (select current.first_seen_at from current)", "(select current.stale_at from current) < now()", "then hopper_schedules.next_fire_at"}, "the newest definition a running worker reports is in force, an older one never takes it back, and an unchanged expression keeps its next slot"},
		{"SeeScheduleVersions", ":exec", nil, "workers report the definitions they hold"},
		{"RegisterWorker", ":one", []string{"on conflict (id) do update", "coalesce(sqlc.narg(started_at)::timestamptz, now())", "returning w.started_at", "where excluded.last_seen_at - w.last_seen_at > '1 millisecond'::interval * w.stale_after_ms"}, "a worker takes over the id of a gone worker only, never a live one's, and a worker that writes its row again keeps its own started_at"},
		{"BeatWorker", ":one", []string{"where w.id = @id::text and w.started_at = @started_at::timestamptz", "as found", "as gone_waiting", "g.id <> @id::text"}, "the heartbeat refreshes its own row only, learns whether it must write it again, and whether a gone worker waits to be released"},
		{"ListWorkers", ":many", nil, "the operator lists workers"},
		{"RemoveWorker", ":execrows", []string{"started_at = @started_at::timestamptz"}, "a worker's clean stop removes its own row, not that of another run under its id"},
		{"PruneWorkers", ":execrows", []string{"for update skip locked", "limit @max_workers::integer"}, "every worker prunes at once, in bounded batches"},
		{"NextScheduleFire", ":one", nil, ""}, {"ListSchedules", ":many", nil, ""}, {"PauseSchedule", ":one", nil, ""},
		{"ResumeSchedule", ":one", []string{"hopper_wake('hopper_jobs'"}, "a resume wakes the workers"},
		{"TriggerSchedule", ":one", []string{"hopper_wake('hopper_jobs'"}, "a trigger wakes the workers"}, {"GetSchedule", ":one", nil, ""},
	} {
		sql, ok := sqlByName[c.query]
		require.True(t, ok, "query %s is missing from queries/: the runtime calls it (%s)", c.query, c.why)
		require.Equal(t, c.cmd, cmdByName[c.query], "query %s must be %s", c.query, c.cmd)
		for _, frag := range c.must {
			require.Contains(t, sql, normalise(frag), "query %s lost %q: %s", c.query, frag, c.why)
		}
	}
}

// readStatements reads every query of queries/: its SQL without comments,
// lower-cased and whitespace-normalised, and its sqlc command, by name.
func readStatements(t *testing.T) (sqlByName, cmdByName map[string]string) {
	t.Helper()
	sqlByName, cmdByName = map[string]string{}, map[string]string{}
	header := regexp.MustCompile(`(?m)^-- name: (\w+) (:\w+)\s*$`)
	entries, err := fs.ReadDir(queries.Files, ".")
	require.NoError(t, err)
	for _, e := range entries {
		raw, err := fs.ReadFile(queries.Files, e.Name())
		require.NoError(t, err)
		text := string(raw)
		marks := header.FindAllStringSubmatchIndex(text, -1)
		for i, m := range marks {
			end := len(text)
			if i+1 < len(marks) {
				end = marks[i+1][0]
			}
			name := text[m[2]:m[3]]
			require.NotContains(t, sqlByName, name, "query %s is defined twice", name)
			cmdByName[name] = text[m[4]:m[5]]
			sqlByName[name] = stripComments(text[m[1]:end])
		}
	}
	return sqlByName, cmdByName
}

func stripComments(sql string) string {
	var b strings.Builder
	for _, line := range strings.Split(sql, "\n") {
		if i := strings.Index(line, "--"); i >= 0 {
			line = line[:i]
		}
		b.WriteString(line)
		b.WriteString(" ")
	}
	return normalise(b.String())
}

func normalise(s string) string { return strings.Join(strings.Fields(strings.ToLower(s)), " ") }
