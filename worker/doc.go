// Package worker runs Hopper jobs: it claims them, runs their handlers,
// keeps their leases alive, records results in batches, retries failures
// with backoff, sweeps the leases of crashed workers, and shuts down
// without losing or stranding a job.
//
// # Running a worker
//
//	w, err := worker.New(pool, worker.Config{
//		Queues: map[string]int{"default": 20, "email": 5}, // concurrency per queue
//	})
//	err = worker.Handle(w, WelcomeEmail, func(ctx context.Context, job *jobs.Job[Welcome]) error {
//		return send(ctx, job.Payload.UserID)
//	}, worker.Timeout(time.Minute))
//	err = w.Run(ctx) // blocks until ctx is cancelled, then shuts down
//
// The pool's search_path decides which schema's jobs the worker runs, or
// Config.Schema, which names it per statement for pools whose search_path
// cannot be set (PgBouncer in transaction mode; run it there with pgx's
// exec mode and PollOnly). Run refuses to start when hopper_jobs is not
// there, or the schema is older than this build needs
// (jobs.ErrNotMigrated), and warns at start when the pool goes through a
// pooler with pgx's statement cache or LISTEN on.
//
// # Delivery: at least once
//
// A job runs again when its worker is gone or its lease expired. A worker
// that misses three beats (Config.BeatInterval) is gone, crashed or
// stalled, and the next beat of a live worker hands its jobs back within
// seconds; a worker restarted under a stable Config.ID hands back its
// earlier run's jobs as it starts. The lease (Config.LeaseDuration) is the
// bound otherwise: a worker that lost the database for longer than a
// lease, or ran a handler past its lease without extending it. Handlers
// must therefore be idempotent. Every result a worker records is fenced by
// the claim (job id and attempt): a worker whose job was handed back or
// taken over cannot ack, fail or extend it; its result is refused, logged
// and counted.
//
// # Flow control
//
// Config.FlowControl shapes how a queue's jobs are claimed, in the claim
// statement itself, so the rules hold across every worker process and
// through crashes: KeyLimit (at most N running jobs per concurrency key;
// the KeyLimit handle option sets a kind's own), Rate (at most N jobs
// claimed per interval, per queue, kind or key: a sliding window kept in
// the database, or in memory with Local), Fair (keys served round-robin)
// and PriorityAging. A queue without FlowControl claims with the plain,
// cursor-driven statement and pays nothing.
//
// # Middleware and hooks
//
// Config.Middleware wraps every run of every handler, and the Use option
// of Handle a kind's own: each sees the job as stored (jobs.Row, with its
// metadata) and calls next. Config.OnOutcome hooks are told what became of
// each run once the database recorded it (Outcome); Config.OnError hooks of
// each run that failed or panicked (*PanicError). Judge reads a run's
// result as the worker does. With none registered, a run takes no extra
// step. The hopperotel module traces runs through them.
//
// # How it runs
//
//   - Claiming: each queue asks for exactly as many jobs as it has free
//     slots, again at once after a full batch; an idle queue waits for a
//     LISTEN/NOTIFY wake-up (one per enqueue statement and queue) or the
//     poll interval, whichever comes first. PollOnly turns LISTEN off, for
//     PgBouncer in transaction mode. A lost LISTEN session is re-opened.
//     A claim waits up to 30s for its answer, however short the lease: a
//     claim given up on would strand its jobs until a sweep.
//   - Claim cursor: a queue's claim seeks just past the last job it
//     claimed rather than scanning the ready index from its start, whose
//     first entries belong to jobs already claimed: dead, but kept until
//     vacuum runs, and kept however long any session holds an older
//     snapshot open. A wake-up names where its jobs sit in claim order
//     (priority, run_at, id) and moves the cursor back when they are
//     behind it (a transaction that committed late, a more urgent job, a
//     release, a sweep, a promotion); every FullScanInterval a claim scans
//     from the start, for what no wake-up announced. Without LISTEN every
//     claim scans from the start. A queue under a key limit (not Fair, no
//     rate per kind or key, no PriorityAging) keeps a cursor too, moving
//     past jobs held back by their keys' limits: recording a keyed job's
//     result moves it back to that job, before the rest of its key.
//   - Leases: the worker's heartbeat, a loop on a connection of its own,
//     keeps two rhythms, named apart here: the beat (its row in the
//     registry, every BeatInterval: see Crashes below) and the lease
//     extension, which extends every held claim in batches every
//     ExtendInterval, a third of the lease by default. A claim the database no longer holds for us
//     cancels its handler's context with cause ErrLeaseLost, and the result
//     is discarded. ExtendLease pushes one job's lease further by hand.
//   - Results: successes are acked in batches (one statement per flush,
//     flushed at AckBatchSize or AckFlushInterval); failures are nacked in
//     the same flush. A flush that fails is retried; nothing is reported
//     done before the database said so.
//   - Failures: the error goes to the job's history; the job waits
//     Backoff.Delay(attempt) (exponential with jitter, per kind with
//     RetryBackoff) and is dead-lettered when out of attempts. RetryAt and
//     RetryAfter choose the next attempt's time; Permanent fails the job
//     for good at once. A panic is a failure whose history entry carries
//     the panic value and stack. Timeout and TimeoutBy bound a run. A
//     payload that cannot be decoded or upgraded goes to the dead table at
//     once, without burning retries.
//   - Snooze and Cancel: a handler that returns Snooze(d) ends the run
//     without success or failure: the job waits d and runs again, not
//     charged an attempt and with no error entry. One that returns
//     Cancel(reason) ends its job as cancelled: kept in the dead table, not
//     retried, not counted as failed.
//   - Cancelled by an operator (hopper.Client.CancelJobs, `hopper jobs cancel`): the
//     worker running the job hears of it at once (a notification on its
//     LISTEN session; with PollOnly at its next lease extension) and
//     cancels the handler's context with the cause ErrCancelled; whatever
//     the handler returns afterwards is discarded, and an AckTx is refused.
//   - Paused queues (hopper.Client.PauseQueue): the claim statement itself
//     checks the pause, so a paused queue's claims take nothing, in every
//     worker, from the moment the pause commits; a resume wakes the queue.
//   - History: a kind (KeepHistory) or queue (Config.KeepHistoryByQueue) may keep
//     its completed jobs, with the handler's result (HandleWithResult), in
//     the history table for a while: the statement that acknowledges them
//     copies them, so it costs no round trip, and every worker prunes the
//     expired ones. Config.DeadRetention prunes the old dead and cancelled
//     jobs of the worker's queues the same way. With neither set, the ack
//     is the plain statement.
//   - Periodic jobs (Schedule): a schedule names a kind, a cron expression
//     (five fields, an optional seconds field, or @every/@daily …), a time
//     zone, a payload function of the slot, and a policy for missed slots
//     (FireOnce, SkipMissed, CatchUp). Every worker that defines it takes
//     part in firing it, with no leader: the one that takes its row (FOR
//     UPDATE SKIP LOCKED) enqueues the slot's job and moves the schedule on
//     by compare-and-set in the same transaction, so each slot fires once
//     whatever crashes. The job's unique key is "schedule:<name>@<slot>".
//     Workers report the definitions they hold: a changed definition takes
//     over from the one it replaces (the newest wins, and an older one that
//     comes back mid-deploy does not take it back), and a schedule no
//     running worker defines is kept, reported stale, and not fired.
//     A schedule whose fire fails (its payload function panics, its
//     enqueue is refused) waits out a backoff of its own (1s doubling to a
//     minute), logged and counted; the other schedules fire on time.
//   - Sweep: every worker reclaims expired leases on a jittered interval;
//     concurrent sweeps are safe.
//   - Identity: ID names the worker in leases and histories. A worker
//     started with the ID of a crashed predecessor first gives back that
//     predecessor's leases.
//   - Transactional completion: AckTx acknowledges the job inside the
//     handler's own transaction, so its effects and its completion commit
//     together; the worker then does not ack it again. Whether the ack
//     committed is read from the job's row once the handler returns: gone
//     is done; still there is a rollback (whole, or to a savepoint before
//     the ack), and the handler's return value decides; still live on a
//     timeline other than the ack's is a transaction lost in a failover,
//     and the job runs again, uncharged.
//   - One bad result costs only its job: messages and results are made
//     storable before they are sent (valid UTF-8, no NUL, messages at most
//     MaxMessageBytes), and a batch the server refuses for what it carries
//     is split until the bad result stands alone, which is then made
//     plainer until the server takes it. A refused statement is never sent
//     again unchanged.
//   - Crashes: every worker beats in the registry (hopper_workers) every
//     BeatInterval (1s), on a connection the heartbeat keeps for
//     itself. A worker three beats late is gone: the next beat of a live
//     worker hands its jobs back, charged and fenced, so they run again
//     about 3 to 4 seconds after a crash, whatever the worker's ID. An ID
//     is held by one live worker (ErrWorkerIDInUse).
//   - Shutdown: when Run's context is cancelled the worker stops claiming,
//     waits for running handlers until the last quarter of
//     ShutdownTimeout (20s), cancels the rest (cause ErrShutdown), records
//     every finished result, and gives every unfinished job back at once
//     without charging an attempt, waking other workers to take it. Run
//     returns by ShutdownTimeout, inside Kubernetes' default 30s grace.
//   - Isolation: Run refuses (ErrIsolation) a pool whose sessions default
//     to repeatable read or serializable.
//   - Faults: claim, beat, lease extension, flush, sweep and listen errors
//     are logged and retried with backoff; a restarted database is
//     reconnected to by the pool.
//   - Observability: log/slog with job id, kind, queue and attempt;
//     Prometheus counters and histograms when Config.Registerer is set
//     (hopper_job_outcomes_total counts every run by its Outcome), and the
//     database's gauges at Config.MetricsAddr.
//
// The guide docs/workers.md covers the configuration, handlers, leases,
// retries, timeouts, AckTx, middleware, hooks and shutdown with runnable
// programs; docs/flow-control.md covers Config.FlowControl and
// docs/periodic-jobs.md covers Schedule.
package worker
