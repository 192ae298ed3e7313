package cli

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
)

// uiAccess is what hopper ui's flags say about who may read and change.
type uiAccess struct {
	token        string
	readOnly     bool
	protectReads bool
}

// settle refuses flags that promise a protection they do not give, and
// picks a random token where one is needed and none was given.
func (a *uiAccess) settle() error {
	if a.readOnly && a.token != "" && !a.protectReads {
		// A token that guards nothing would let the operator believe the
		// dashboard is guarded: say so rather than ignore it.
		return fmt.Errorf("%w: --token has no use with --read-only: every change is refused and reads need no token (add --protect-reads to make every page need it)", errUsage)
	}
	if a.token == "" && (!a.readOnly || a.protectReads) {
		b := make([]byte, 16)
		_, _ = rand.Read(b)
		a.token = hex.EncodeToString(b)
	}
	return nil
}

// banner prints the dashboard's address, with the token when one is
// needed, and what the token opens.
func (a uiAccess) banner(w io.Writer, url string) {
	switch {
	case a.readOnly && a.protectReads:
		fmt.Fprintf(w, "Hopper dashboard (read-only): %s?token=%s\n(the token is needed to see anything; nothing can be changed)\n", url, a.token)
	case a.readOnly:
		fmt.Fprintf(w, "Hopper dashboard (read-only): %s\n", url)
	case a.protectReads:
		fmt.Fprintf(w, "Hopper dashboard: %s?token=%s\n(the token is needed to see or change anything)\n", url, a.token)
	default:
		fmt.Fprintf(w, "Hopper dashboard: %s?token=%s\n(the token is needed to change anything; without it the pages are read-only)\n", url, a.token)
	}
}

// warnExposed warns, on w, when the dashboard listens where other
// machines may reach it and its pages need no token: anyone there can
// read every job's payload. Said at start, before the address, so that
// it is not missed.
func (a uiAccess) warnExposed(w io.Writer, addr net.Addr) {
	if a.protectReads || isLoopback(addr) {
		return
	}
	fmt.Fprintf(w, "hopper ui: warning: %s is not a loopback address and reading needs no token: anyone who can reach it can read every job's payload, metadata and errors (add --protect-reads, or listen on 127.0.0.1)\n", addr)
}

// isLoopback reports whether addr, as bound, is a loopback address only
// (0.0.0.0 and :: are every address, so not).
func isLoopback(addr net.Addr) bool {
	tcp, ok := addr.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
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
