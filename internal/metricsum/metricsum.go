// Package metricsum reads a value back from Prometheus registries: the
// demo and the benchmark report the workers' own counters, and tests assert
// on them.
package metricsum

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Sum adds up, across the registries, the counters and gauges that a
// selector names: a metric name, optionally followed by label matchers in
// PromQL's equality form, as in hopper_job_outcomes_total{outcome="done"}.
func Sum(selector string, regs ...prometheus.Gatherer) float64 {
	name, want := parse(selector)
	var sum float64
	for _, r := range regs {
		families, err := r.Gather()
		if err != nil {
			continue
		}
		for _, f := range families {
			if f.GetName() != name {
				continue
			}
			for _, m := range f.GetMetric() {
				if matches(m, want) {
					sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
				}
			}
		}
	}
	return sum
}

func parse(selector string) (string, map[string]string) {
	name, rest, ok := strings.Cut(selector, "{")
	if !ok {
		return selector, nil
	}
	want := map[string]string{}
	for _, pair := range strings.Split(strings.TrimSuffix(rest, "}"), ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(pair), "=")
		want[k] = strings.Trim(v, `"`)
	}
	return name, want
}

func matches(m *dto.Metric, want map[string]string) bool {
	found := 0
	for _, l := range m.GetLabel() {
		if v, ok := want[l.GetName()]; ok {
			if l.GetValue() != v {
				return false
			}
			found++
		}
	}
	return found == len(want)
}
