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
//
// It counts the claims of every queue of Config.Queues whether or not
// handlers are registered yet, so it can be called right after New. A
// kind registered with a key limit of its own puts every queue under flow
// control (one claim each), and a schedule adds Schedules: call it again
// after registering them for the exact count, or use ConnectionsFor for
// the most a worker of a Config may need.
func (w *Worker) Connections() Connections {
	var queues []string
	for name := range w.cfg.Queues {
		queues = append(queues, name)
	}
	w.mu.Lock()
	schedules := len(w.schedules) > 0
	w.mu.Unlock()
	return connectionsOf(&w.cfg, queues, w.handlers.kindKeyLimits(), schedules)
}

// ConnectionsFor says how many connections a worker made with cfg may
// hold at once, at most, before there is a pool or a worker: for sizing
// the pool it will run on (pgxpool.Config.MaxConns, or pool_max_conns in
// the connection string), and the fleet's connections to PostgreSQL.
// It counts the worst case of what handlers and schedules add: every
// queue claiming on its own (as when a kind sets a key limit of its own)
// and a schedule firing. A worker's Connections, once its handlers and
// schedules are registered, is never more. The LISTEN session, outside
// the pool, is one more connection per worker. It returns cfg's error,
// as New would, when cfg is not valid.
func ConnectionsFor(cfg Config) (Connections, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return Connections{}, fmt.Errorf("worker: %w", err)
	}
	var queues []string
	for name := range cfg.Queues {
		queues = append(queues, name)
	}
	return connectionsOf(&cfg, queues, true, true), nil
}

// connectionsOf counts the connections of a worker with cfg (defaults
// applied) serving queues; byKind: some kind sets its own key limit;
// schedules: the worker defines schedules.
func connectionsOf(cfg *Config, queues []string, byKind, schedules bool) Connections {
	c := Connections{Completer: 1, Heartbeat: 1, Maintenance: 1}
	// A queue under flow control claims on its own; the plain ones share
	// one claim in flight at a time (producer.ClaimBatch).
	plain := false
	for _, name := range queues {
		if _, limited := cfg.FlowControl[name]; limited || byKind {
			c.Claims++
		} else {
			plain = true
		}
	}
	if plain {
		c.Claims++
	}
	if schedules {
		c.Schedules = 1
	}
	if cfg.MetricsAddr != "" {
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
