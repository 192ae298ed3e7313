package hopper

import (
	"errors"

	"github.com/jackc/pgx/v5"
)

// Errors the operations return, to match with errors.Is. Each is wrapped
// with what was asked ("job 42: hopper: job not found").
var (
	// ErrNotFound: no job of that id, live or finished (never enqueued,
	// completed without history, or purged).
	ErrNotFound = errors.New("hopper: job not found")
	// ErrFinished: the job has finished already (completed, dead or
	// cancelled), so it cannot be cancelled, edited or deleted.
	ErrFinished = errors.New("hopper: job already finished")
	// ErrRunning: a worker has claimed the job, so it can no longer be
	// edited or deleted (UpdateJob, DeleteJob change only pending and
	// scheduled jobs); CancelJobs stops it.
	ErrRunning = errors.New("hopper: job is running")
	// ErrPayloadMismatch: a new payload that does not fit the job: made
	// for another kind, raw JSON of another type than the job's payload
	// (an array for an object), or a payload version newer than the job's.
	ErrPayloadMismatch = errors.New("hopper: payload does not fit the job")
	// ErrHasRecords: the job's durable handler has recorded calls (steps,
	// sleeps, waits, progress), so its payload, version and kind can no
	// longer change (UpdateJob): its records were made for them, and its
	// next run replays them. Its run time, priority, queue and attempts
	// still can. Cancel it and enqueue another to start over.
	ErrHasRecords = errors.New("hopper: job has durable records")
	// ErrUnknownQueue: no worker has served the queue, no operator has
	// paused it, and it holds no job.
	ErrUnknownQueue = errors.New("hopper: unknown queue")
	// ErrUnknownSchedule: no schedule of that name (a worker creates it
	// when it starts with the schedule defined).
	ErrUnknownSchedule = errors.New("hopper: unknown schedule")
	// ErrUnknownWorker: no worker of that id in the registry (never
	// started, stopped cleanly, or gone so long ago its row was pruned).
	ErrUnknownWorker = errors.New("hopper: unknown worker")
	// ErrWorkerAlive: the worker still beats, so its jobs are its own;
	// ReleaseWorkerJobs takes them only when forced.
	ErrWorkerAlive = errors.New("hopper: worker is alive")
	// ErrNotBlocked: the sequence is not blocked (no dead or cancelled
	// head holds it), so there is nothing to retry or skip.
	ErrNotBlocked = errors.New("hopper: sequence not blocked")
	// ErrInvalidCursor: a page cursor that ListJobs did not make.
	ErrInvalidCursor = errors.New("hopper: invalid page cursor")
	// ErrInvalidFilter: a filter that makes no sense (a limit out of
	// range, a time range that ends before it starts, a state of the wrong
	// table), or one that would match every dead job without All.
	ErrInvalidFilter = errors.New("hopper: invalid filter")
	// ErrInvalidEvent: an event with an empty or too long name, or a
	// payload that does not marshal or is too large (EmitEvent).
	ErrInvalidEvent = errors.New("hopper: invalid event")
	// ErrNotWaiting: the job is in no durable wait (WakeJob): it is not
	// sleeping nor awaiting an event.
	ErrNotWaiting = errors.New("hopper: job not waiting")
	// ErrWaitUnsupported: WaitJob and WaitWorkflow need a Client made on a
	// *pgxpool.Pool, to hold a connection that listens.
	ErrWaitUnsupported = errors.New("hopper: waiting needs a Client on a pool")
	// ErrJobFailed: the job awaited by WaitJobResult ended dead or
	// cancelled.
	ErrJobFailed = errors.New("hopper: job failed")
	// ErrNoResult: the job awaited by WaitJobResult completed, but no
	// result was kept (its kind and queue keep no history, or its handler
	// returned none).
	ErrNoResult = errors.New("hopper: no result kept")
)

func isNoRows(err error) bool { return errors.Is(err, pgx.ErrNoRows) }
