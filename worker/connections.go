package worker

import "fmt"

// Connections is how many pool connections a worker's own statements may
// hold at once, part by part. Handlers that use the database (AckTx, their
// own queries) need connections on top: up to the sum of the queues'
// concurrency when every handler does.
type Connections struct {
	Claims    int // one per queue under flow control, one for all the others
	Completer int // the batched acknowledgements
	Heartbeat int // the registry beat and the lease extensions
	// Maintenance: sweep, promotion and pruning run on their own
	// intervals, each a short statement; they rarely overlap, and when
	// they do one waits a moment, which delays nothing that matters.
	Maintenance int
	Schedules   int // firing schedules, when the worker defines any
	Metrics     int // the metrics server's reads, when MetricsAddr is set
}

// Total is the sum of the parts.
func (c Connections) Total() int {
	return c.Claims + c.Completer + c.Heartbeat + c.Maintenance + c.Schedules + c.Metrics
}

func (c Connections) String() string {
	return fmt.Sprintf("%d (claims %d, completer %d, heartbeat %d, maintenance %d, schedules %d, metrics %d)",
		c.Total(), c.Claims, c.Completer, c.Heartbeat, c.Maintenance, c.Schedules, c.Metrics)
}

// Connections says how many connections the worker's own statements may
// hold at once. The LISTEN session is not among them: it is a connection
// of its own, outside the pool. Size the pool at least Total() plus what
// the handlers use; Run logs a warning when the pool is smaller than
// Total().
func (w *Worker) Connections() Connections {
	c := Connections{Completer: 1, Heartbeat: 1, Maintenance: 1}
	if !w.handlers.empty() {
		// A queue under flow control claims on its own; the plain ones
		// share one claim in flight at a time (claimBatch).
		byKind, plain := w.handlers.kindKeyLimits(), false
		for name := range w.producers {
			if _, limited := w.cfg.FlowControl[name]; limited || byKind {
				c.Claims++
			} else {
				plain = true
			}
		}
		if plain {
			c.Claims++
		}
	}
	if len(w.maintainer.schedules) > 0 {
		c.Schedules = 1
	}
	if w.cfg.MetricsAddr != "" {
		c.Metrics = 1
	}
	return c
}

// checkPoolSize warns when the pool cannot hold every connection the
// worker's own statements may use at once: they would queue for one
// another, and a claim could wait behind a sweep.
func (w *Worker) checkPoolSize() {
	need, have := w.Connections(), int(w.pool.Config().MaxConns)
	if have >= need.Total() {
		return
	}
	w.log.Warn("the pool is smaller than this worker needs: its statements will wait for connections; set pool_max_conns (or pgxpool.Config.MaxConns) to at least what it needs plus what its handlers use",
		"pool_max_conns", have, "needs", need.String())
}
