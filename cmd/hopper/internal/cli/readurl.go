package cli

import (
	"flag"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hopperq/hopper"
)

// readURLEnv names a standby for the commands that only read, when
// --read-url is not given.
const readURLEnv = "HOPPER_READ_URL"

// readURLUsage documents --read-url, which hopper stats, jobs list and
// show, history and ui take.
const readURLUsage = "read from this connection string instead (a standby, to keep the primary free): what it shows is as stale as the standby, and says how stale; changes still go to --database-url (default: $" + readURLEnv + ")"

// declareReadURL adds --read-url to fs.
func declareReadURL(fs *flag.FlagSet, p *string) { fs.StringVar(p, "read-url", "", readURLUsage) }

// readURL is --read-url, else $HOPPER_READ_URL, else "" (read where
// everything else goes).
func readURL(flagValue string) string {
	if flagValue != "" {
		return flagValue
	}
	return os.Getenv(readURLEnv)
}

// connectReadClient is connectClient on the read URL when there is one,
// with how stale its reads are; without one it is connectClient, and lag
// is nil.
func (e *env) connectReadClient(flagValue string) (_ *hopper.Client, lag *hopper.ReadLag, done func(), err error) {
	url := readURL(flagValue)
	if url == "" {
		c, done, err := e.connectClient()
		return c, nil, done, err
	}
	reads := *e
	reads.dbURL = url
	c, done, err := reads.connectClient()
	if err != nil {
		return nil, nil, nil, fmt.Errorf("--read-url: %w", err)
	}
	l, err := c.GetReadLag(e.ctx)
	if err != nil {
		done()
		return nil, nil, nil, fmt.Errorf("--read-url: %w", err)
	}
	return c, &l, done, nil
}

// connectReadPool is connectHopperSized on the read URL, or nil when
// there is none.
func (e *env) connectReadPool(flagValue string, maxConns int32) (*pgxpool.Pool, error) {
	url := readURL(flagValue)
	if url == "" {
		return nil, nil
	}
	reads := *e
	reads.dbURL = url
	pool, err := reads.connectHopperSized(maxConns)
	if err != nil {
		return nil, fmt.Errorf("--read-url: %w", err)
	}
	return pool, nil
}
