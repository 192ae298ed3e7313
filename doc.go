// Package hopper operates a Hopper job queue from Go: look jobs up and list
// them, read stats, cancel jobs (running ones included), retry and purge
// dead ones, and pause and resume queues and schedules. The hopper command
// and the dashboard use exactly this API. The README is the front door;
// docs/operating.md is the guide to operating a queue.
//
// Hopper is a job queue that lives in the PostgreSQL your application
// already has. Its other packages:
//
//   - jobs: job kinds with typed, versioned payloads; enqueueing in your
//     own transactions; the job row (jobs.Row) and its states.
//   - worker: the runtime that claims, runs and records jobs.
//   - schema: the migrations that create Hopper's tables.
//   - db and queries: the SQL, and sqlc's output, for applications that
//     compile Hopper's statements into their own sqlc build.
//
// # A client
//
// A Client runs on a pool (or a *pgx.Conn) whose search_path leads to
// Hopper's tables, or on one scoped to their schema with jobs.InSchema:
//
//	client := hopper.NewClient(pool)
//	row, err := client.GetJob(ctx, 42)
//
// Every operation has a Tx variant that runs in the caller's transaction
// (any jobs.DBTX: a pgx.Tx, or the transaction of your own sqlc code), so
// that it commits or rolls back with the caller's writes:
//
//	tx, _ := pool.Begin(ctx)
//	_ = client.CancelJobTx(ctx, tx, orderJobID) // cancelled if and only if tx commits
//	... your own writes ...
//	tx.Commit(ctx)
//
// # Jobs and their states
//
// A job is pending (ready), scheduled (due later), running (claimed under a
// lease), and then, once finished, completed, dead or cancelled (see
// jobs.State). Live jobs are in hopper_jobs; dead and cancelled ones in
// hopper_dead_jobs; completed ones leave no trace unless their kind or
// queue keeps history (worker.KeepHistory,
// worker.Config.KeepHistoryByQueue), in which case they are in
// hopper_job_history until their retention ends. GetJob finds a job in any of them by id; ListJobs lists all of them, newest
// first, with filters (queue, kind, states, unique key, creation time) and
// keyset pages: a page costs the same a million jobs deep as on top.
// A jobs.Row holds the payload as JSON; the kind's Decode makes it typed.
//
// # Cancelling
//
// CancelJobs (CancelJob for one) takes any live job: pending and scheduled ones are cancelled at
// once; a running one's worker is told at once (a notification; a worker
// that polls learns it at its next lease extension) and cancels the handler's
// context with the cause worker.ErrCancelled. Whatever the handler returns
// afterwards is refused: the job is no longer the worker's. Every cancelled
// job is kept, as cancelled, with the dead ones: RetryDeadJobs brings it back.
// A handler can also cancel its own job (worker.Cancel).
//
// # Queues
//
// PauseQueue stops every worker process from claiming a queue's jobs, from
// the moment it commits (the claim statement checks it), workers started
// later included, until ResumeQueue, which wakes them at once. Jobs running
// already finish; enqueueing goes on. Pausing a paused queue, or resuming
// one that is not paused, is not an error: PauseResult.Changed says
// whether anything changed. Paused is all "paused" means: QueueInfo.Workers
// tells whether any live worker serves the queue. A queue is known once a worker has served
// it or it has jobs; operations on a queue Hopper does not know fail with
// ErrUnknownQueue, so that a typo is not silently "paused".
//
// # Schedules
//
// Periodic jobs are defined in code (worker.Schedule) and live in the
// database: ListSchedules lists them with their next and last fire, their
// policy, and whether they are paused or stale (no running worker defines
// them); PauseSchedule and ResumeSchedule stop and restart one (slots
// missed while paused do not fire); TriggerSchedule asks for one fire now.
//
// # Errors
//
// Bad input and missing things come back as errors that match with
// errors.Is: ErrNotFound (no such job), ErrFinished (cancelling a job that
// has finished), ErrUnknownQueue, ErrUnknownSchedule, ErrInvalidCursor (a page cursor ListJobs
// did not make), ErrInvalidFilter (a limit out of range, an empty time
// range, a dead-job filter that would match every job without All), and
// jobs.ErrInvalidQueue, jobs.ErrInvalidState for malformed names. On a
// schema that is missing or older than this build, every operation
// returns an error that matches jobs.ErrNotMigrated and says what to run.
package hopper
