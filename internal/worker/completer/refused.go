package completer

import (
	"errors"
	"strings"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/hopperq/hopper/internal/worker/commitfate"
)

// A statement the server refuses because of what it carries (a character
// the database cannot store, a value too large, a constraint) would be
// refused again unchanged, forever, and every result batched with the bad
// one would wait behind it. So a refused batch is split in halves until
// the bad result stands alone and the rest are recorded; the bad one is
// then made plainer step by step (degrade) until the server takes it.

// refusedForItsData reports whether err is the server refusing a
// statement for what it carries, and its SQLSTATE. A failure whose
// commit's outcome is unknown (commitfate.Unknown: Citus reports a worker
// node's failed commit as XX000, the code of any internal error) is not:
// its results are read first, never split or degraded. Refusals that say
// nothing about the statement (a lost connection, a read-only server, a
// deadlock, a serialization failure, too many connections, an operator's
// intervention, an I/O error) are not: the same statement is tried again
// after a pause, as when the database is unreachable.
func refusedForItsData(err error) (code string, ok bool) {
	var pgErr *pgconn.PgError
	if err == nil || commitfate.Unknown(err) || !errors.As(err, &pgErr) || len(pgErr.Code) < 2 || pgErr.Code == pgerrcode.ReadOnlySQLTransaction {
		return "", false // read-only: the server's fault (Config.ReadOnly)
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
func (c *Completer) splitAcks(acks []Completion, code string, again, unsure []Completion) ([]Completion, []Completion) {
	if len(acks) > 1 {
		again, unsure = c.recordAcks(acks[:len(acks)/2], again, unsure)
		return c.recordAcks(acks[len(acks)/2:], again, unsure)
	}
	res := acks[0]
	res.degraded++
	switch {
	case res.Keep > 0 && res.Result != nil && res.degraded == 1:
		c.cfg.Log.Error("the server refused the handler's result: the job is kept in the history without it",
			"job_id", res.Job.ID(), "kind", res.Job.Kind(), "sqlstate", code)
		res.Result = nil
	case res.Keep > 0 && res.degraded <= 2:
		c.cfg.Log.Error("the server refused to keep the job in the history: it is completed without being kept",
			"job_id", res.Job.ID(), "kind", res.Job.Kind(), "sqlstate", code)
		res.Keep, res.Result = 0, nil
	default:
		c.refusedForGood(res, code)
		return again, unsure
	}
	return c.recordAcks([]Completion{res}, again, unsure)
}

// splitNacks records each half of a refused nack batch on its own, or
// degrades a single refused nack: first its texts become plain ASCII,
// then the job goes dead with a reason saying why, then nothing is left
// to try.
func (c *Completer) splitNacks(nacks []Completion, code string, again, unsure []Completion) ([]Completion, []Completion) {
	if len(nacks) > 1 {
		again, unsure = c.recordNacks(nacks[:len(nacks)/2], again, unsure)
		return c.recordNacks(nacks[len(nacks)/2:], again, unsure)
	}
	res := nacks[0]
	res.degraded++
	switch res.degraded {
	case 1:
		c.cfg.Log.Error("the server refused the job's failure message: it is stored as plain ASCII",
			"job_id", res.Job.ID(), "kind", res.Job.Kind(), "sqlstate", code)
		res.Message, res.DeadReason = asciiText(res.Message), asciiText(res.DeadReason)
	case 2:
		c.cfg.Log.Error("the server refused the job's failure even in plain ASCII: the job goes dead",
			"job_id", res.Job.ID(), "kind", res.Job.Kind(), "sqlstate", code)
		res.Action = ActionDead
		res.Message = "hopper: the server refused this attempt's outcome (SQLSTATE " + code + ")"
		res.DeadReason = "outcome refused by the server (SQLSTATE " + code + ")"
	default:
		c.refusedForGood(res, code)
		return again, unsure
	}
	return c.recordNacks([]Completion{res}, again, unsure)
}

// refusedForGood settles a result the server refused in every form:
// nothing was recorded, the claim is dropped (its lease is no longer
// extended), and the job runs again once its lease expires, charged an
// attempt by the sweep. It is never lost.
func (c *Completer) refusedForGood(res Completion, code string) {
	c.cfg.Log.Error("the server refused every form of this result: the job runs again after its lease expires",
		"job_id", res.Job.ID(), "kind", res.Job.Kind(), "attempt", res.Job.Attempt(), "sqlstate", code)
	c.report(res, OutcomeUnrecorded)
}

// asciiText is the last resort for a message the server still refused
// once storable (a database whose encoding cannot hold some character):
// every byte outside printable ASCII becomes '?'.
func asciiText(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 && r != '\n' && r != '\t' || r > 0x7e {
			return '?'
		}
		return r
	}, s)
}
