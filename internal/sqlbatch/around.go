package sqlbatch

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
)

// Sender sends batches: a pool, a connection or a transaction.
type Sender interface {
	SendBatch(context.Context, *pgx.Batch) pgx.BatchResults
}

// Around sends before, the statement (sql, args) and after as one batch
// and returns the statement's rows. The rows end the batch when they end
// (Next returns false, or Close): what comes after runs only if the
// statement succeeded, and a failure of it, or of the batch's commit, is
// the rows' error.
func Around(ctx context.Context, sender Sender, before Statement, sql string, args []any, after ...Statement) (pgx.Rows, error) {
	b := &pgx.Batch{}
	b.Queue(before.SQL, before.Args...)
	b.Queue(sql, args...)
	for _, s := range after {
		b.Queue(s.SQL, s.Args...)
	}
	br := sender.SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		_ = br.Close()
		return nil, err
	}
	rows, _ := br.Query() // its error, if any, comes out of rows.Err
	return OnEnd(rows, func(stmtErr error) error {
		var err error
		for range after {
			if stmtErr != nil || err != nil {
				break
			}
			_, err = br.Exec()
		}
		return errors.Join(err, br.Close())
	}), nil
}

// OnEnd returns rows that call end once, when they end (Next returns
// false, or Close), with the rows' own error; what end returns becomes the
// rows' error when they have none of their own: a scope, a batch or a
// transaction ended with the statement is then reported with it.
func OnEnd(rows pgx.Rows, end func(stmtErr error) error) pgx.Rows {
	return &endingRows{Rows: rows, end: end}
}

type endingRows struct {
	pgx.Rows
	end    func(stmtErr error) error
	closed bool
	err    error
}

func (r *endingRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.Close()
	return false
}

func (r *endingRows) Close() {
	if r.closed {
		return
	}
	r.closed = true
	r.Rows.Close()
	r.err = r.end(r.Rows.Err())
}

func (r *endingRows) Err() error {
	if err := r.Rows.Err(); err != nil {
		return err
	}
	return r.err
}
