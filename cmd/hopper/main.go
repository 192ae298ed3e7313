// Command hopper operates a Hopper queue: migrations, enqueueing, stats,
// dead-letter triage, cancelling, exporting the SQL, and a demo.
// Run `hopper help` for the commands.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/hopperq/hopper/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
