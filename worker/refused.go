package worker

import (
	"errors"

	"github.com/jackc/pgx/v5/pgconn"
)

// A statement the server refuses because of what it carries (a character
// the database cannot store, a value too large, a constraint) would be
// refused again unchanged, forever, and every result batched with the bad
// one would wait behind it. So a refused batch is split in halves until
// the bad result stands alone and the rest are recorded; the bad one is
// then made plainer step by step (degrade) until the server takes it.

// refusedForItsData reports whether err is the server refusing a
// statement for what it carries, and its SQLSTATE. Refusals that say
// nothing about the statement (a lost connection, a read-only server, a
// deadlock, a serialization failure, too many connections, an operator's
// intervention, an I/O error) are not: the same statement is tried again
// after a pause, as when the database is unreachable.
func refusedForItsData(err error) (code string, ok bool) {
	var pgErr *pgconn.PgError
	if err == nil || !errors.As(err, &pgErr) || len(pgErr.Code) < 2 || pgErr.Code == sqlstateReadOnly {
		return "", false // read-only: the server's fault (readOnlyGuard)
	}
	switch pgErr.Code[:2] {
	case "08", // connection exception
		"40", // transaction rollback: serialization failure, deadlock
		"53", // insufficient resources
		"55", // object not in prerequisite state: lock not available
		"57", // operator intervention: query cancelled, shutdown
		"58": // system error: I/O
		return "", false
	}
	return pgErr.Code, true
}

// splitAcks records each half of a refused ack batch on its own, or
// degrades a single refused ack.
func (cp *completer) splitAcks(acks []completion, code string, again, unsure []completion) ([]completion, []completion) {
	if len(acks) > 1 {
		again, unsure = cp.recordAcks(acks[:len(acks)/2], again, unsure)
		return cp.recordAcks(acks[len(acks)/2:], again, unsure)
	}
	c := acks[0]
	c.degraded++
	switch {
	case c.keep > 0 && c.result != nil && c.degraded == 1:
		cp.log.Error("the server refused the handler's result: the job is kept in the history without it",
			"job_id", c.job.id, "kind", c.job.kind, "sqlstate", code)
		c.result = nil
	case c.keep > 0 && c.degraded <= 2:
		cp.log.Error("the server refused to keep the job in the history: it is completed without being kept",
			"job_id", c.job.id, "kind", c.job.kind, "sqlstate", code)
		c.keep, c.result = 0, nil
	default:
		cp.refusedForGood(c, code)
		return again, unsure
	}
	return cp.recordAcks([]completion{c}, again, unsure)
}

// splitNacks records each half of a refused nack batch on its own, or
// degrades a single refused nack: first its texts become plain ASCII,
// then the job goes dead with a reason saying why, then nothing is left
// to try.
func (cp *completer) splitNacks(nacks []completion, code string, again, unsure []completion) ([]completion, []completion) {
	if len(nacks) > 1 {
		again, unsure = cp.recordNacks(nacks[:len(nacks)/2], again, unsure)
		return cp.recordNacks(nacks[len(nacks)/2:], again, unsure)
	}
	c := nacks[0]
	c.degraded++
	switch c.degraded {
	case 1:
		cp.log.Error("the server refused the job's failure message: it is stored as plain ASCII",
			"job_id", c.job.id, "kind", c.job.kind, "sqlstate", code)
		c.message, c.deadReason = asciiText(c.message), asciiText(c.deadReason)
	case 2:
		cp.log.Error("the server refused the job's failure even in plain ASCII: the job goes dead",
			"job_id", c.job.id, "kind", c.job.kind, "sqlstate", code)
		c.act = actDead
		c.message = "hopper: the server refused this attempt's outcome (SQLSTATE " + code + ")"
		c.deadReason = "outcome refused by the server (SQLSTATE " + code + ")"
	default:
		cp.refusedForGood(c, code)
		return again, unsure
	}
	return cp.recordNacks([]completion{c}, again, unsure)
}

// refusedForGood settles a result the server refused in every form:
// nothing was recorded, the claim is dropped (its lease is no longer
// extended), and the job runs again once its lease expires, charged an
// attempt by the sweep. It is never lost.
func (cp *completer) refusedForGood(c completion, code string) {
	cp.log.Error("the server refused every form of this result: the job runs again after its lease expires",
		"job_id", c.job.id, "kind", c.job.kind, "attempt", c.job.attempt, "sqlstate", code)
	cp.report(c, outcomeUnrecorded)
}
