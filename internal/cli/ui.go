package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/hopperq/hopper/dashboard"
)

func uiCommand() *command {
	var addr, token string
	var allowHosts []string
	var readOnly bool
	var sampleEvery time.Duration
	return &command{
		name:    "ui",
		args:    "[--addr HOST:PORT] [--allow-host NAME]... [--token T | --read-only]",
		summary: "serve the web dashboard (overview with charts, jobs, dead-letter triage, queues, schedules) on 127.0.0.1",
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&addr, "addr", "127.0.0.1:8080", "address to listen on (another host than 127.0.0.1 exposes the queue: keep a token)")
			fs.StringVar(&token, "token", "", "token that changes need (default: a random one, printed)")
			fs.BoolVar(&readOnly, "read-only", false, "refuse every change")
			fs.Func("allow-host", "also answer requests for this host name (repeatable, or comma-separated; * for every name); IP addresses, localhost and --addr's host always are, other names get 421 (a guard against DNS rebinding)", func(v string) error {
				for _, name := range strings.Split(v, ",") {
					if name = strings.TrimSpace(name); name != "" {
						allowHosts = append(allowHosts, name)
					}
				}
				return nil
			})
			fs.DurationVar(&sampleEvery, "sample-every", 10*time.Second, "how often the overview's charts are sampled (they keep an hour)")
		},
		run: func(e *env, _ *flag.FlagSet, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("%w: ui takes no argument", errUsage)
			}
			if sampleEvery <= 0 {
				return fmt.Errorf("%w: --sample-every must be positive", errUsage)
			}
			if token == "" && !readOnly {
				b := make([]byte, 16)
				_, _ = rand.Read(b)
				token = hex.EncodeToString(b)
			}
			pool, err := e.connectHopper()
			if err != nil {
				return err
			}
			defer pool.Close()
			d, err := dashboard.New(dashboard.Config{DB: pool, Token: token, ReadOnly: readOnly, SampleEvery: sampleEvery,
				AllowedHosts: uiHosts(addr, allowHosts), Logger: slog.New(slog.NewTextHandler(e.stderr, nil))})
			if err != nil {
				return err
			}
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return fmt.Errorf("listen on %s: %w", addr, err)
			}
			url := "http://" + ln.Addr().String() + "/"
			switch {
			case readOnly:
				fmt.Fprintf(e.stdout, "Hopper dashboard (read-only): %s\n", url)
			default:
				fmt.Fprintf(e.stdout, "Hopper dashboard: %s?token=%s\n(the token is needed to change anything; without it the pages are read-only)\n", url, token)
			}
			// Every request and the sampler are done before the pool closes
			// (deferred above).
			return serveDashboard(e.ctx, ln, d, d.Run, shutdownGrace)
		},
	}
}

// uiHosts are the host names hopper ui answers besides localhost and IP
// addresses: the one --addr names (a name the operator typed is one the
// browser will send) and those of --allow-host.
func uiHosts(addr string, allowed []string) []string {
	if host, _, err := net.SplitHostPort(addr); err == nil && host != "" {
		allowed = append([]string{host}, allowed...)
	}
	return allowed
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
