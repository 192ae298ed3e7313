package dashboard

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// hostRule says which Host headers the dashboard answers.
//
// Why: a page on evil.example can make its name resolve to 127.0.0.1
// (DNS rebinding); the browser then treats the dashboard as that page's
// own origin and lets its script read job payloads. Such a request still
// carries the page's name, Host: evil.example, and only the Host shows
// it. An IP address as Host cannot come from rebinding (it needs a name),
// and localhost is resolved by the machine itself, so those are always
// answered; any other name must be allowed by the operator.
type hostRule struct {
	any   bool            // "*" was allowed: the mounting service checks Host itself
	names map[string]bool // allowed names, normalized by hostName
}

// anyHost in Config.AllowedHosts turns the check off.
const anyHost = "*"

func newHostRule(allowed []string) (hostRule, error) {
	h := hostRule{names: map[string]bool{"localhost": true}}
	for _, a := range allowed {
		if a == anyHost {
			h.any = true
			continue
		}
		name := hostName(a)
		if name == "" || strings.ContainsAny(a, "/\\@ \t?#*") { // a URL or a pattern, not a name
			return h, fmt.Errorf("dashboard: AllowedHosts: %q is not a host name (a port, if given, is ignored)", a)
		}
		h.names[name] = true
	}
	return h, nil
}

// allows reports whether the dashboard answers a request for host (a
// Host header: a name or address, with or without a port). Ports are not
// compared: a rebinding page chooses the name, not the port.
func (h hostRule) allows(host string) bool {
	if h.any {
		return true
	}
	name := hostName(host)
	if name == "" {
		return false
	}
	if _, err := netip.ParseAddr(name); err == nil {
		return true
	}
	return h.names[name]
}

// hostName is host without its port and IPv6 brackets, in lower case,
// without the trailing dot of a fully qualified name: "LocalHost.:8080"
// and "localhost" are one name.
func hostName(host string) string {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	} else if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		host = host[1 : len(host)-1]
	}
	return strings.TrimSuffix(strings.ToLower(host), ".")
}

// checkHost answers 421 Misdirected Request, before anything else is
// looked at (static files, the token in the query, JSON), to a request
// whose Host the dashboard does not answer.
func (d *Dashboard) checkHost(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !d.hosts.allows(r.Host) {
			// Plain text, no page: nothing of the dashboard's (its session,
			// its flash) for a request that may be a rebinding page's.
			http.Error(w, fmt.Sprintf(
				"This dashboard does not answer for the host name %q (a guard against DNS rebinding): open it at 127.0.0.1 or localhost, or allow the name (hopper ui --allow-host, or dashboard.Config.AllowedHosts).",
				hostName(r.Host)), http.StatusMisdirectedRequest)
			return
		}
		next.ServeHTTP(w, r)
	})
}
