package worker

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// The files in monitoring/ name Hopper's metrics; this test holds them to
// what a worker exports. Their PromQL is checked by promtool
// (.ci/check-alerts.sh).
var monitoringFiles = []string{
	"../monitoring/prometheus/hopper-alerts.yml",
	"../monitoring/prometheus/hopper-alerts_test.yml",
	"../monitoring/grafana/hopper-dashboard.json",
	"../monitoring/README.md",
}

// exported is one metric a worker exports.
type exported struct {
	labels    []string
	histogram bool
}

// exportedMetrics lists the worker's metrics, its own and the database's
// gauges of its metrics endpoint, with their label names.
func exportedMetrics(t *testing.T) map[string]exported {
	t.Helper()
	m, err := newMetrics(nil)
	require.NoError(t, err)
	descRE := regexp.MustCompile(`^Desc\{fqName: "([^"]+)", .*variableLabels: \{([^}]*)\}\}$`)
	out := map[string]exported{}
	// The read-lag gauge too, which only a worker with MetricsReadPool
	// registers.
	all := append(append(m.collectors(), newDBGauges().collectors()...), newReadLagGauge())
	for _, c := range all {
		_, histogram := c.(*prometheus.HistogramVec)
		descs := make(chan *prometheus.Desc, 16)
		c.Describe(descs)
		close(descs)
		for d := range descs {
			match := descRE.FindStringSubmatch(d.String())
			require.NotNil(t, match, "cannot read %s", d)
			var labels []string
			if match[2] != "" {
				labels = strings.Split(match[2], ",")
			}
			out[match[1]] = exported{labels: labels, histogram: histogram}
		}
	}
	require.Contains(t, out, "hopper_queue_jobs")
	require.Contains(t, out, "hopper_jobs_claimed_total")
	return out
}

// known label values: a typo in one would make an alert that never fires.
var knownValues = map[string][]string{
	"outcome": {string(OutcomeDone), string(OutcomeFailed), string(OutcomeDead), string(OutcomeCancelled),
		string(OutcomeSnoozed), string(OutcomeRefused), string(OutcomeReleased), string(OutcomeAbandoned),
		string(OutcomeUnconfirmed), string(OutcomeUnrecorded), fireEnqueued, fireFailed},
	"state": {"ready", "scheduled", "running", "waiting", "dead"},
	"wait":  {"sleep", "event"},
}

// TestMonitoringNames: every hopper_* name in monitoring/ (alert rules,
// their tests, the dashboard, the README) is one a worker exports, with
// labels it has and label values it sets; the dashboard shows every one
// of them.
func TestMonitoringNames(t *testing.T) {
	metrics := exportedMetrics(t)
	nameRE := regexp.MustCompile(`hopper_[a-z0-9_]+`)
	selectorRE := regexp.MustCompile(`(hopper_[a-z0-9_]+)\{([^}]*)\}`)
	matcherRE := regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*(?:\\?["'])([^"'\\]*)`)

	// base is the exported metric a series name belongs to.
	base := func(name string) (string, bool) {
		if _, ok := metrics[name]; ok {
			return name, true
		}
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if b, ok := strings.CutSuffix(name, suffix); ok && metrics[b].histogram {
				return b, true
			}
		}
		return "", false
	}

	for _, file := range monitoringFiles {
		raw, err := os.ReadFile(file)
		require.NoError(t, err)
		text := string(raw)
		for _, name := range nameRE.FindAllString(text, -1) {
			if strings.HasSuffix(name, "_") {
				continue // prose: hopper_queue_* and the like
			}
			_, ok := base(name)
			require.True(t, ok, "%s names %s, which no worker exports", file, name)
		}
		for _, sel := range selectorRE.FindAllStringSubmatch(text, -1) {
			b, _ := base(sel[1])
			allowed := append([]string{"job", "instance"}, metrics[b].labels...)
			if sel[1] != b && strings.HasSuffix(sel[1], "_bucket") {
				allowed = append(allowed, "le")
			}
			for _, m := range matcherRE.FindAllStringSubmatch(sel[2], -1) {
				label, op, value := m[1], m[2], m[3]
				require.Contains(t, allowed, label, "%s: %s has no label %s", file, sel[1], label)
				known, ok := knownValues[label]
				if !ok || strings.HasPrefix(value, "$") || (op != "=" && op != "=~") {
					continue
				}
				for _, v := range strings.Split(value, "|") {
					require.Contains(t, known, v, "%s: %s{%s} matches a value Hopper never sets", file, sel[1], sel[2])
				}
			}
		}
	}

	// The dashboard: it parses, asks for the DS_PROMETHEUS data source on
	// import, queries it in every panel, and shows every metric.
	raw, err := os.ReadFile("../monitoring/grafana/hopper-dashboard.json")
	require.NoError(t, err)
	var dash struct {
		Inputs []struct {
			Name     string `json:"name"`
			PluginID string `json:"pluginId"`
		} `json:"__inputs"`
		SchemaVersion int    `json:"schemaVersion"`
		UID           string `json:"uid"`
		Panels        []struct {
			Type       string `json:"type"`
			Title      string `json:"title"`
			Datasource struct {
				UID string `json:"uid"`
			} `json:"datasource"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(raw, &dash))
	require.Len(t, dash.Inputs, 1)
	require.Equal(t, "DS_PROMETHEUS", dash.Inputs[0].Name)
	require.Equal(t, "prometheus", dash.Inputs[0].PluginID)
	require.GreaterOrEqual(t, dash.SchemaVersion, 39)
	require.NotEmpty(t, dash.UID)
	shown := map[string]bool{}
	for _, p := range dash.Panels {
		if p.Type == "row" {
			continue
		}
		require.Equal(t, "${DS_PROMETHEUS}", p.Datasource.UID, "panel %q", p.Title)
		require.NotEmpty(t, p.Targets, "panel %q", p.Title)
		for _, target := range p.Targets {
			require.NotEmpty(t, target.Expr, "panel %q", p.Title)
			for _, name := range nameRE.FindAllString(target.Expr, -1) {
				b, _ := base(name)
				shown[b] = true
			}
		}
	}
	var missing []string
	for name := range metrics {
		if !shown[name] {
			missing = append(missing, name)
		}
	}
	slices.Sort(missing)
	require.Empty(t, missing, "metrics no dashboard panel shows")
}
