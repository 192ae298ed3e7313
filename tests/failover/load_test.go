package failover

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hopperq/hopper/jobs"
)

// load is the producers: each enqueues in a transaction that also inserts
// the business row (fo_orders), one after another with a pause between.
// Most transactions enqueue one job; every tenth a three-step workflow
// (a, then b and c after a); every tenth another a job of its producer's
// sequence. What each commit returned is remembered: an acknowledged
// commit whose row is missing later was lost by the database, and a
// commit that failed without an answer may have committed or not (the
// final tables say which).
type load struct {
	pool  *pgxpool.Pool
	pause time.Duration

	mu        sync.Mutex
	committed []int64     // orders whose COMMIT returned success
	ackedAt   []time.Time // when each of committed was acknowledged
	unsure    int         // COMMITs that failed without an answer
	errs      int         // transactions that failed before COMMIT (rolled back)
	lastErr   error
	enqueued  atomic.Int64
	stop      context.CancelFunc
	done      sync.WaitGroup
}

// start runs n producers until stop.
func startLoad(ctx context.Context, pool *pgxpool.Pool, n int, pause time.Duration) *load {
	ctx, cancel := context.WithCancel(ctx)
	l := &load{pool: pool, pause: pause, stop: cancel}
	for p := range n {
		l.done.Add(1)
		go func() {
			defer l.done.Done()
			l.produce(ctx, p)
		}()
	}
	return l
}

// halt stops the producers and waits for them.
func (l *load) halt() {
	l.stop()
	l.done.Wait()
}

func (l *load) produce(ctx context.Context, producer int) {
	for i := 0; ctx.Err() == nil; i++ {
		order, err := l.once(ctx, producer, i)
		l.mu.Lock()
		var unsure *commitError
		switch {
		case err == nil:
			l.committed = append(l.committed, order)
			l.ackedAt = append(l.ackedAt, time.Now())
			l.enqueued.Add(1)
		case errors.As(err, &unsure):
			l.unsure++
			l.lastErr = err
		case ctx.Err() == nil:
			l.errs++
			l.lastErr = err
		}
		l.mu.Unlock()
		pause := l.pause
		if err != nil {
			pause = 100 * time.Millisecond // the server is away: no tight loop
		}
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
	}
}

// commitError is a COMMIT that got no answer: the transaction may have
// committed.
type commitError struct{ err error }

func (e *commitError) Error() string { return "commit: " + e.err.Error() }
func (e *commitError) Unwrap() error { return e.err }

// once runs one producer transaction; a statement gets 10 s, as a
// request handler's would.
func (l *load) once(ctx context.Context, producer, i int) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	tx, err := l.pool.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
	want := 1
	if i%10 == 0 {
		want = 3
	}
	var order int64
	plain := i%10 != 0 && i%10 != 5
	if err := tx.QueryRow(ctx, "INSERT INTO fo_orders (producer, jobs, plain) VALUES ($1, $2, $3) RETURNING id",
		producer, want, plain).Scan(&order); err != nil {
		return 0, err
	}
	switch {
	case i%10 == 0:
		wf := fmt.Sprintf("wf-%d", order)
		entry := func(step string) jobs.Entry { return task.Entry(Task{Order: order, WF: wf, Step: step}) }
		w := jobs.NewWorkflow(wf).Add("a", entry("a")).Add("b", entry("b"), jobs.After("a")).Add("c", entry("c"), jobs.After("a"))
		_, err = jobs.EnqueueWorkflow(ctx, tx, w)
	case i%10 == 5:
		_, err = task.Enqueue(ctx, tx, Task{Order: order, Seq: fmt.Sprintf("seq-%d", producer), Pos: int(order)},
			jobs.Sequence(fmt.Sprintf("seq-%d", producer)))
	default:
		_, err = task.Enqueue(ctx, tx, Task{Order: order})
	}
	if err != nil {
		return 0, err
	}
	if err := tx.Commit(ctx); err != nil {
		if pgErrorCode(err) != "" {
			return 0, err // the server answered: rolled back
		}
		return 0, &commitError{err}
	}
	return order, nil
}

// ackedAt is when order was acknowledged (zero if it was not).
func (l *load) acked(order int64) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, o := range l.committed {
		if o == order {
			return l.ackedAt[i]
		}
	}
	return time.Time{}
}

// snapshot is what the producers saw so far.
func (l *load) snapshot() (committed []int64, unsure, errs int, lastErr error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]int64(nil), l.committed...), l.unsure, l.errs, l.lastErr
}

func pgErrorCode(err error) string {
	var pgErr interface{ SQLState() string }
	if errors.As(err, &pgErr) {
		return pgErr.SQLState()
	}
	return ""
}
