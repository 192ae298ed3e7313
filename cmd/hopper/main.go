// Command hopper operates a Hopper queue: migrations, enqueueing, stats,
// jobs, queues and schedules (list, pause, resume, cancel), dead-letter
// triage, exporting the SQL, the web dashboard, and a demo. A command is a
// plural noun, then a verb: hopper queues pause email.
// Run `hopper help` for the commands.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/hopperq/hopper/cmd/hopper/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
