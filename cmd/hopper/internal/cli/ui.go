package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/hopperq/hopper/dashboard"
	"github.com/hopperq/hopper/jobs"
)

func uiCommand() *command {
	var addr string
	var allowHosts []string
	var access uiAccess
	var sampleEvery time.Duration
	var readFrom string
	var sharded bool
	return &command{
		name: "ui",
		args: "[--addr HOST:PORT] [--allow-host NAME]... [--token T] [--read-only] [--protect-reads] [--read-url URL | --sharded]",
		summary: "serve the web dashboard (overview with charts, jobs, dead-letter triage, queues, schedules, workers) on 127.0.0.1; " +
			"with --sharded, a sharded Hopper's: every shard's node and jobs, a job id lookup, and each shard's own dashboard",
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&addr, "addr", "127.0.0.1:8080", "address to listen on (another host than 127.0.0.1 exposes the queue: add --protect-reads)")
			fs.StringVar(&access.token, "token", "", "token that changes need, and reads with --protect-reads (default: a random one, printed)")
			fs.BoolVar(&access.readOnly, "read-only", false, "refuse every change (a --token then needs --protect-reads: it would guard nothing)")
			fs.BoolVar(&access.protectReads, "protect-reads", false, "every page needs the token too, not only changes (for an address others can reach)")
			fs.Func("allow-host", "also answer requests for this host name (repeatable, or comma-separated; * for every name); IP addresses, localhost and --addr's host always are, other names get 421 (a guard against DNS rebinding)", func(v string) error {
				for _, name := range strings.Split(v, ",") {
					if name = strings.TrimSpace(name); name != "" {
						allowHosts = append(allowHosts, name)
					}
				}
				return nil
			})
			durationVar(fs, &sampleEvery, "sample-every", 10*time.Second, "how often the overview's charts are sampled (they keep an hour)")
			declareReadURL(fs, &readFrom)
			declareSharded(fs, &sharded)
		},
		run: func(e *env, _ *flag.FlagSet, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("%w: ui takes no argument", errUsage)
			}
			if sampleEvery <= 0 {
				return fmt.Errorf("%w: --sample-every must be positive", errUsage)
			}
			if sharded && readFrom != "" {
				return fmt.Errorf("%w: --sharded reads the coordinator (--database-url): it takes no --read-url", errUsage)
			}
			if err := access.settle(); err != nil {
				return err
			}
			cfg := dashboard.Config{Token: access.token, ReadOnly: access.readOnly,
				ProtectReads: access.protectReads, AllowedHosts: uiHosts(addr, allowHosts), SampleEvery: sampleEvery,
				Logger: slog.New(slog.NewTextHandler(e.stderr, nil))}
			if sharded {
				set, pool, err := e.connectSet(dashboardMaxConns)
				if err != nil {
					return err
				}
				defer pool.Close()
				cfg.DB = pool
				d, err := dashboard.NewSharded(dashboard.ShardedConfig{Config: cfg, Set: set})
				if err != nil {
					return err
				}
				return serveUI(e, addr, access, d, d.Run)
			}
			pool, err := e.connectHopperSized(dashboardMaxConns)
			if err != nil {
				return err
			}
			defer pool.Close()
			reads, err := e.connectReadPool(readFrom, dashboardMaxConns)
			if err != nil {
				return err
			}
			var readDB jobs.DBTX // nil: the pages read where changes go
			if reads != nil {
				defer reads.Close()
				readDB = reads
			}
			cfg.DB, cfg.ReadDB = pool, readDB
			d, err := dashboard.New(cfg)
			if err != nil {
				return err
			}
			return serveUI(e, addr, access, d, d.Run)
		},
	}
}

// serveUI listens on addr, says where, and serves the dashboard h, with
// run its sampler, until the command is stopped. Every request and the
// sampler are done when it returns, before the caller closes the pool.
func serveUI(e *env, addr string, access uiAccess, h http.Handler, run func(context.Context)) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", addr, err)
	}
	access.warnExposed(e.stderr, ln.Addr())
	access.banner(e.stdout, "http://"+ln.Addr().String()+"/")
	return serveDashboard(e.ctx, ln, h, run, shutdownGrace)
}

// shutdownGrace bounds how long the dashboard's requests in flight may
// take to finish once the command is stopped; then they are cut.
const shutdownGrace = 5 * time.Second

// serveDashboard serves h on ln, and runs run (the dashboard's sampler),
// until ctx ends or serving fails. It returns only once both are done: the
// server shut down (its requests in flight finished, or cut after grace)
// and run returned, so that the caller may close what they use.
func serveDashboard(ctx context.Context, ln net.Listener, h http.Handler, run func(context.Context), grace time.Duration) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		run(ctx)
	}()
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	shut := make(chan struct{})
	go func() {
		defer close(shut)
		<-ctx.Done()
		sctx, stop := context.WithTimeout(context.Background(), grace)
		defer stop()
		if err := srv.Shutdown(sctx); err != nil {
			_ = srv.Close() // the grace is over: cut the requests still running
		}
	}()
	err := srv.Serve(ln) // returns as soon as Shutdown begins
	cancel()
	<-shut
	<-ran
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
