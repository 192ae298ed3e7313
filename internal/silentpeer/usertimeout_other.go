//go:build !linux

package silentpeer

import (
	"net"
	"time"
)

// setUserTimeout does nothing where TCP_USER_TIMEOUT is not available:
// keepalives alone bound an idle connection there.
func setUserTimeout(*net.TCPConn, time.Duration) error { return nil }
