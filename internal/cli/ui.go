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
	"time"

	"github.com/hopperq/hopper/dashboard"
)

func uiCommand() *command {
	var addr, token string
	var readOnly bool
	var sampleEvery time.Duration
	return &command{
		name:    "ui",
		args:    "[--addr HOST:PORT] [--token T | --read-only]",
		summary: "serve the web dashboard (overview with charts, jobs, dead-letter triage, queues, schedules) on 127.0.0.1",
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&addr, "addr", "127.0.0.1:8080", "address to listen on (another host than 127.0.0.1 exposes the queue: keep a token)")
			fs.StringVar(&token, "token", "", "token that changes need (default: a random one, printed)")
			fs.BoolVar(&readOnly, "read-only", false, "refuse every change")
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
				Logger: slog.New(slog.NewTextHandler(e.stderr, nil))})
			if err != nil {
				return err
			}
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return fmt.Errorf("listen on %s: %w", addr, err)
			}
			ctx, cancel := context.WithCancel(e.ctx)
			defer cancel()
			go d.Run(ctx)
			srv := &http.Server{Handler: d, ReadHeaderTimeout: 10 * time.Second}
			go func() {
				<-ctx.Done()
				shut, stop := context.WithTimeout(context.Background(), 5*time.Second)
				defer stop()
				_ = srv.Shutdown(shut)
			}()
			url := "http://" + ln.Addr().String() + "/"
			switch {
			case readOnly:
				fmt.Fprintf(e.stdout, "Hopper dashboard (read-only): %s\n", url)
			default:
				fmt.Fprintf(e.stdout, "Hopper dashboard: %s?token=%s\n(the token is needed to change anything; without it the pages are read-only)\n", url, token)
			}
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		},
	}
}
