package dashboard

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestHostRule: which Host headers the dashboard answers. IP addresses
// and localhost always (rebinding needs a name of the attacker's), with
// or without a port; other names only when allowed, whatever their case,
// port or trailing dot; "*" answers all.
func TestHostRule(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		allowed []string
		host    string
		want    bool
	}{
		{"loopback v4", nil, "127.0.0.1", true},
		{"loopback v4, port", nil, "127.0.0.1:8080", true},
		{"loopback v6", nil, "[::1]", true},
		{"loopback v6, port", nil, "[::1]:8080", true},
		{"localhost", nil, "localhost", true},
		{"localhost, port", nil, "localhost:8080", true},
		{"localhost, case and trailing dot", nil, "LocalHost.:8080", true},
		{"another IP address (the listen address)", nil, "10.1.2.3:8080", true},
		{"another IPv6 address", nil, "[fe80::1]:8080", true},
		{"a rebinding page's name", nil, "evil.example", false},
		{"a rebinding page's name, port", nil, "evil.example:8080", false},
		{"a name that starts like an address", nil, "127.0.0.1.evil.example", false},
		{"a name that ends like localhost", nil, "evil.localhost", false},
		{"localhost as a subdomain", nil, "localhost.evil.example", false},
		{"no Host", nil, "", false},
		{"allowed name", []string{"dash.example"}, "dash.example", true},
		{"allowed name, port", []string{"dash.example"}, "dash.example:8080", true},
		{"allowed name, case", []string{"Dash.Example"}, "DASH.example.", true},
		{"allowed with a port, any port", []string{"dash.example:443"}, "dash.example:8080", true},
		{"allowed name, not its subdomain", []string{"dash.example"}, "a.dash.example", false},
		{"allowed name, not another", []string{"dash.example"}, "evil.example", false},
		{"every host", []string{"*"}, "evil.example", true},
	} {
		rule, err := newHostRule(tc.allowed)
		require.NoError(t, err, tc.name)
		require.Equal(t, tc.want, rule.allows(tc.host), "%s: Host %q, allowed %q", tc.name, tc.host, tc.allowed)
	}
	for _, bad := range []string{"", "http://dash.example", "dash.example/x", "*.example", "user@dash.example"} {
		_, err := newHostRule([]string{bad})
		require.Error(t, err, "%q is no host name", bad)
	}
}
