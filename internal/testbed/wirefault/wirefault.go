// Package wirefault is a fault-injecting TCP proxy that sits between a test's
// PostgreSQL client and the server. It exists to test what Hopper does when
// the network fails at the worst moment: a statement that committed on the
// server whose reply never reaches the client, a connection that hangs
// after the commit, a partition that keeps TCP open, a dead server.
//
// Unlike a byte pump, the proxy frames the PostgreSQL wire protocol in both
// directions, so faults are tied to statements: it remembers each
// connection's prepared statements (Parse) and portals (Bind), and counts
// Sync and Query messages against the server's ReadyForQuery replies, so it
// knows which reply belongs to which execution. Statements are matched by
// substring on their SQL text; sqlc's "-- name: Foo :many" comment lines
// make good markers. Typical use:
//
//	p := wirefault.Start(t, "127.0.0.1:5432")
//	pool, err := pgxpool.New(ctx, p.URL(dsn))
//	p.CutAfterReply("-- name: AckBatch :many", 1)
//	// ... the next AckBatch commits, and its caller sees a broken connection.
//
// Limits: no TLS (the proxy answers SSLRequest and GSSENCRequest with 'N'
// itself; use [Proxy.URL], which forces sslmode=disable), no replication
// protocol, and it tracks only what the faults need. A fault on a statement
// inside an explicit transaction fires at that statement's ReadyForQuery,
// which is before COMMIT: the work is then not committed but rolled back.
// It is a test helper: it trusts the server and the client.
package wirefault

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
)

// Startup-phase request codes (protocol 3.0 section "Message Formats").
const (
	cancelRequestCode = 80877102
	sslRequestCode    = 80877103
	gssEncRequestCode = 80877104

	maxMessage = 1 << 30 // the server's own limit for a message
)

type action int

const (
	cutReply   action = iota + 1 // drop the reply and close the connection
	holdReply                    // keep the reply back until Release
	errorReply                   // replace the reply with an error
)

// rule arms a fault for the next left executions whose SQL contains substr.
type rule struct {
	substr string
	act    action
	left   int
	err    []byte // errorReply: the ErrorResponse and ReadyForQuery sent instead
}

// Proxy forwards connections to one upstream PostgreSQL and injects faults.
// All methods are safe for concurrent use.
type Proxy struct {
	upstream string
	ln       net.Listener
	ctx      context.Context // cancelled by Close: aborts dials and WaitFired
	cancel   context.CancelFunc
	wg       sync.WaitGroup // every goroutine the proxy started

	mu       sync.Mutex
	cond     *sync.Cond // broadcast on every change a blocked pump may wait for
	closed   bool
	stalled  bool
	refusing bool
	conns    map[*conn]struct{}
	rules    []*rule
	fired    map[string]int
	firedCh  chan struct{} // closed and replaced each time a fault fires
}

// Start listens on 127.0.0.1:0, forwarding each connection to upstream
// (host:port). The proxy and all its connections close at t's cleanup.
func Start(t testing.TB, upstream string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("wirefault: listen: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{
		upstream: upstream,
		ln:       ln,
		ctx:      ctx,
		cancel:   cancel,
		conns:    make(map[*conn]struct{}),
		fired:    make(map[string]int),
		firedCh:  make(chan struct{}),
	}
	p.cond = sync.NewCond(&p.mu)
	p.wg.Add(1)
	go p.acceptLoop()
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// Addr is the proxy's listening address, host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// URL rewrites a postgres:// URL or a keyword/value DSN (as pgx parses it)
// to connect through the proxy, with sslmode=disable. An empty dsn gives a
// keyword/value DSN with only host, port and sslmode.
func (p *Proxy) URL(dsn string) string {
	host, port, _ := net.SplitHostPort(p.Addr())
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		if u, err := url.Parse(dsn); err == nil {
			u.Host = p.Addr() // also drops any multi-host list
			q := u.Query()
			// Query parameters override the URL's host in pgx and libpq.
			q.Del("host")
			q.Del("hostaddr")
			q.Del("port")
			q.Set("sslmode", "disable")
			u.RawQuery = q.Encode()
			return u.String()
		}
	}
	// In keyword/value form the last occurrence of a keyword wins.
	return strings.TrimSpace(dsn + " host=" + host + " port=" + port + " sslmode=disable")
}

// CutAfterReply arms a fault for the next n executions, on any connection,
// of a statement whose SQL contains substr: the statement goes to the server
// in full, the proxy reads the reply through ReadyForQuery, discards it and
// closes both sides. The client sees a broken connection after the server
// finished (and, in autocommit, committed) the statement. The fault fires
// even if the statement failed; an execution whose connection dies before
// its reply still uses up one of the n.
func (p *Proxy) CutAfterReply(substr string, n int) { p.arm(substr, cutReply, n) }

// StallAfterRequest is like CutAfterReply but, instead of closing, holds the
// reply and stops forwarding in both directions on that connection until
// Release or Close: the client sees a connection hanging after the commit,
// which only its context deadline ends.
func (p *Proxy) StallAfterRequest(substr string, n int) { p.arm(substr, holdReply, n) }

// FailAfterReply is like CutAfterReply but, instead of closing, replaces
// the whole reply with an ErrorResponse of severity ERROR, SQLSTATE code
// and message, then a ReadyForQuery (idle): the client sees the server
// refuse a statement that the server finished (and, in autocommit,
// committed), and its connection goes on. This is what Citus's
// coordinator answers when a worker node committed and the coordinator
// could not see it ("could not commit transaction for shard …", XX000).
// Use it for statements run outside an explicit transaction.
func (p *Proxy) FailAfterReply(substr string, n int, code, message string) {
	var msg []byte
	field := func(typ byte, v string) { msg = append(append(append(msg, typ), v...), 0) }
	field('S', "ERROR")
	field('V', "ERROR")
	field('C', code)
	field('M', message)
	msg = append(msg, 0)
	out := []byte{'E', 0, 0, 0, 0}
	binary.BigEndian.PutUint32(out[1:], uint32(4+len(msg)))
	out = append(out, msg...)
	out = append(out, 'Z', 0, 0, 0, 5, 'I')
	p.armRule(&rule{substr: substr, act: errorReply, left: n, err: out})
}

func (p *Proxy) arm(substr string, act action, n int) {
	p.armRule(&rule{substr: substr, act: act, left: n})
}

func (p *Proxy) armRule(r *rule) {
	if r.left <= 0 {
		panic(fmt.Sprintf("wirefault: arming %q with n=%d, want n > 0", r.substr, r.left))
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rules = append(p.rules, r)
}

// Release forwards the replies held by StallAfterRequest and resumes those
// connections (if their clients are still there).
func (p *Proxy) Release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.held = false
	}
	p.cond.Broadcast()
}

// Fired reports how many times a fault armed with exactly substr has fired,
// that is reached its reply's ReadyForQuery.
func (p *Proxy) Fired(substr string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.fired[substr]
}

// WaitFired blocks until Fired(substr) >= n, ctx ends or the proxy closes.
func (p *Proxy) WaitFired(ctx context.Context, substr string, n int) error {
	for {
		p.mu.Lock()
		got, changed := p.fired[substr], p.firedCh
		p.mu.Unlock()
		if got >= n {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("wirefault: %q fired %d of %d times: %w", substr, got, n, ctx.Err())
		case <-p.ctx.Done():
			return fmt.Errorf("wirefault: proxy closed with %q fired %d of %d times", substr, got, n)
		}
	}
}

// Stall stops forwarding in both directions on every connection, existing
// and new (new ones are accepted and then get nothing): a network partition
// that leaves TCP open. Bytes read meanwhile wait for Unstall. Note that a
// pgx connection whose context ends sends a CancelRequest on a new
// connection and then drains for up to 15s in a goroutine: while stalled,
// that goroutine lives until Unstall or Close.
func (p *Proxy) Stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stalled = true
}

// Unstall resumes forwarding, starting with what Stall held back.
func (p *Proxy) Unstall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stalled = false
	p.cond.Broadcast()
}

// CutAll closes both sides of every open connection now.
func (p *Proxy) CutAll() {
	for _, c := range p.snapshot() {
		c.close()
	}
}

// Refuse, while on, closes new client connections as soon as they are
// accepted, as if the database were unreachable. Open ones are unaffected.
func (p *Proxy) Refuse(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refusing = on
}

// Close stops the proxy, closes every connection and waits for all its
// goroutines, even while stalled or holding. It is idempotent.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.cancel()
	err := p.ln.Close()
	p.CutAll()
	p.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		err = nil // closed before
	}
	return err
}

func (p *Proxy) snapshot() []*conn {
	p.mu.Lock()
	defer p.mu.Unlock()
	cs := make([]*conn, 0, len(p.conns))
	for c := range p.conns {
		cs = append(cs, c)
	}
	return cs
}

func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		nc, err := p.ln.Accept()
		if err != nil {
			return // closed; other Accept errors are not worth a retry loop in tests
		}
		p.mu.Lock()
		if p.closed || p.refusing {
			p.mu.Unlock()
			_ = nc.Close()
			continue
		}
		c := &conn{p: p, client: nc, stmts: map[string]string{}, portals: map[string]string{}}
		p.conns[c] = struct{}{}
		// Added under mu while not closed, so Close's wg.Wait sees it.
		p.wg.Add(1)
		p.mu.Unlock()
		go c.run()
	}
}

// matchLocked consumes one execution from the first armed rule matching sql.
func (p *Proxy) matchLocked(sql string) *rule {
	for i, r := range p.rules {
		if strings.Contains(sql, r.substr) {
			if r.left--; r.left == 0 {
				p.rules = append(p.rules[:i:i], p.rules[i+1:]...)
			}
			return r
		}
	}
	return nil
}

func (p *Proxy) fireLocked(substr string) {
	p.fired[substr]++
	close(p.firedCh)
	p.firedCh = make(chan struct{})
}

// fault is a rule attached to the connection where it matched. The sync
// group it belongs to is the target-th ReadyForQuery on that connection.
type fault struct {
	rule   *rule
	target int
}

// conn is one proxied client connection. Fields marked mu are guarded by
// p.mu; stmts and portals belong to the client->server goroutine.
type conn struct {
	p      *Proxy
	client net.Conn
	server net.Conn // mu; nil until dialled

	closed  bool   // mu
	held    bool   // mu: StallAfterRequest fired and not released
	syncs   int    // mu: messages sent that the server answers with one ReadyForQuery
	readies int    // mu: ReadyForQuery messages received
	pending *fault // mu

	stmts   map[string]string // prepared statement name -> SQL
	portals map[string]string // portal name -> SQL
}

func (c *conn) run() {
	defer c.p.wg.Done()
	defer c.close()
	in := bufio.NewReader(c.client)
	startup, err := c.readStartup(in)
	if err != nil {
		return
	}
	// Dial only now, so a connection accepted during Stall shows the server
	// nothing (and no authentication_timeout runs there).
	var d net.Dialer
	server, err := d.DialContext(c.p.ctx, "tcp", c.p.upstream)
	if err != nil {
		return
	}
	c.p.mu.Lock()
	if c.closed {
		c.p.mu.Unlock()
		_ = server.Close()
		return
	}
	c.server = server
	c.p.wg.Add(1)
	c.p.mu.Unlock()
	go func() {
		defer c.p.wg.Done()
		defer c.close()
		c.serverToClient()
	}()
	out := bufio.NewWriter(server)
	if _, err := out.Write(startup); err != nil || out.Flush() != nil {
		return
	}
	c.clientToServer(in, out)
}

// close shuts both sides; the pumps then fail their reads and writes.
func (c *conn) close() {
	c.p.mu.Lock()
	if c.closed {
		c.p.mu.Unlock()
		return
	}
	c.closed = true
	delete(c.p.conns, c)
	c.p.cond.Broadcast()
	server := c.server
	c.p.mu.Unlock()
	_ = c.client.Close()
	if server != nil {
		_ = server.Close()
	}
}

// flowing blocks while forwarding is stopped for this direction and reports
// whether the connection is still open.
func (c *conn) flowing(toServer bool) bool {
	c.p.mu.Lock()
	defer c.p.mu.Unlock()
	for !c.closed && (c.p.stalled || (toServer && c.held)) {
		c.p.cond.Wait()
	}
	return !c.closed
}

// readStartup returns the startup (or cancel) message to forward, once
// forwarding flows, answering encryption requests itself.
func (c *conn) readStartup(in *bufio.Reader) ([]byte, error) {
	for {
		msg, err := readUntyped(in)
		if err != nil {
			return nil, err
		}
		if !c.flowing(true) {
			return nil, net.ErrClosed
		}
		switch binary.BigEndian.Uint32(msg[4:8]) {
		case sslRequestCode, gssEncRequestCode:
			// Refuse encryption: the client then sends the real startup.
			if _, err := c.client.Write([]byte{'N'}); err != nil {
				return nil, err
			}
		case cancelRequestCode:
			return msg, nil // the server answers it by hanging up
		default:
			c.p.mu.Lock()
			c.syncs = 1 // the server ends authentication with a ReadyForQuery
			c.p.mu.Unlock()
			return msg, nil
		}
	}
}

func (c *conn) clientToServer(in *bufio.Reader, out *bufio.Writer) {
	var buf []byte
	for {
		typ, msg, err := readTyped(in, buf)
		if err != nil {
			return
		}
		buf = msg
		c.observe(typ, msg[5:])
		if !c.flowing(true) {
			return
		}
		if _, err := out.Write(msg); err != nil {
			return
		}
		// Batch writes like the client did: flush once its burst is read.
		if in.Buffered() == 0 && out.Flush() != nil {
			return
		}
	}
}

// observe follows statements and portals, and arms a fault when an armed
// statement is executed. Execution means Execute (extended protocol) or
// Query (simple protocol); Parse or Describe alone does not count.
func (c *conn) observe(typ byte, body []byte) {
	switch typ {
	case 'P': // Parse: statement name, SQL, parameter types
		name, rest := cstring(body)
		sql, _ := cstring(rest)
		c.stmts[name] = sql
	case 'B': // Bind: portal name, statement name, ...
		portal, rest := cstring(body)
		stmt, _ := cstring(rest)
		c.portals[portal] = c.stmts[stmt]
	case 'C': // Close: 'S' or 'P', name
		if len(body) > 0 {
			name, _ := cstring(body[1:])
			if body[0] == 'S' {
				delete(c.stmts, name)
			} else {
				delete(c.portals, name)
			}
		}
	case 'E': // Execute: portal name, row limit; answered at the next Sync
		portal, _ := cstring(body)
		c.executing(c.portals[portal])
	case 'Q': // Query: answered with its own ReadyForQuery
		sql, _ := cstring(body)
		c.executing(sql)
		c.countSync()
	case 'S', 'F': // Sync, FunctionCall
		c.countSync()
	}
}

func (c *conn) executing(sql string) {
	c.p.mu.Lock()
	defer c.p.mu.Unlock()
	if c.pending != nil || sql == "" {
		return // one fault per sync group: the connection ends there anyway
	}
	if r := c.p.matchLocked(sql); r != nil {
		c.pending = &fault{rule: r, target: c.syncs + 1}
	}
}

func (c *conn) countSync() {
	c.p.mu.Lock()
	defer c.p.mu.Unlock()
	c.syncs++
}

func (c *conn) serverToClient() {
	in := bufio.NewReader(c.server)
	out := bufio.NewWriter(c.client)
	var buf, held []byte
	for {
		typ, msg, err := readTyped(in, buf)
		if err != nil {
			_ = out.Flush() // e.g. the server's FATAL error before it hung up
			return
		}
		buf = msg
		if !c.flowing(false) {
			return
		}
		c.p.mu.Lock()
		f := c.pending
		// Once every earlier sync group is answered, all that follows up to
		// the target ReadyForQuery is the faulted statement's group.
		inFault := f != nil && c.readies >= f.target-1
		if typ == 'Z' {
			c.readies++
		}
		done := inFault && typ == 'Z' && c.readies == f.target
		c.p.mu.Unlock()

		if !inFault {
			if _, err := out.Write(msg); err != nil {
				return
			}
			if in.Buffered() == 0 && out.Flush() != nil {
				return
			}
			continue
		}
		if f.rule.act == holdReply {
			held = append(held, msg...)
		}
		if !done {
			continue
		}
		// The server has answered the whole group: deliver what came before
		// it, then fire.
		if out.Flush() != nil {
			return
		}
		c.p.mu.Lock()
		c.pending = nil
		c.p.fireLocked(f.rule.substr)
		if f.rule.act == cutReply {
			c.p.mu.Unlock()
			return // the deferred close cuts both sides
		}
		if f.rule.act == errorReply {
			c.p.mu.Unlock()
			if _, err := out.Write(f.rule.err); err != nil || out.Flush() != nil {
				return
			}
			continue
		}
		c.held = true
		for !c.closed && (c.held || c.p.stalled) {
			c.p.cond.Wait()
		}
		open := !c.closed
		c.p.mu.Unlock()
		if !open {
			return
		}
		if _, err := out.Write(held); err != nil || out.Flush() != nil {
			return
		}
		held = nil
	}
}

// readUntyped reads an untyped message: int32 length (itself included), body.
func readUntyped(r *bufio.Reader) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n < 8 || n > 10000 { // the server's own startup packet limit
		return nil, fmt.Errorf("wirefault: startup message length %d", n)
	}
	msg := make([]byte, n)
	copy(msg, hdr[:])
	_, err := io.ReadFull(r, msg[4:])
	return msg, err
}

// readTyped reads a type byte, int32 length (itself included) and body into
// buf's storage, returning the whole message.
func readTyped(r *bufio.Reader, buf []byte) (byte, []byte, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if n < 4 || n > maxMessage {
		return 0, nil, fmt.Errorf("wirefault: message %q length %d", hdr[0], n)
	}
	size := 1 + int(n)
	if cap(buf) < size {
		buf = make([]byte, size)
	}
	msg := buf[:size]
	copy(msg, hdr[:])
	_, err := io.ReadFull(r, msg[5:])
	return hdr[0], msg, err
}

// cstring splits a NUL-terminated string off b.
func cstring(b []byte) (string, []byte) {
	i := bytes.IndexByte(b, 0)
	if i < 0 {
		return string(b), nil
	}
	return string(b[:i]), b[i+1:]
}
