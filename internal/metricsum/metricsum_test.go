package metricsum_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/internal/metricsum"
)

func TestSum(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x_total"}, []string{"queue", "outcome"})
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "y"})
	reg.MustRegister(c, g)
	c.WithLabelValues("a", "done").Add(2)
	c.WithLabelValues("b", "done").Add(3)
	c.WithLabelValues("a", "failed").Add(5)
	g.Set(7)
	other := prometheus.NewRegistry()
	oc := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x_total"}, []string{"queue", "outcome"})
	other.MustRegister(oc)
	oc.WithLabelValues("a", "done").Add(11)

	for _, tc := range []struct {
		selector string
		want     float64
	}{
		{"x_total", 21},
		{`x_total{outcome="done"}`, 16},
		{`x_total{outcome="done",queue="a"}`, 13},
		{`x_total{queue="a", outcome="failed"}`, 5},
		{`x_total{missing="z"}`, 0},
		{"y", 7},
		{"nothing", 0},
	} {
		require.Equal(t, tc.want, metricsum.Sum(tc.selector, reg, other), tc.selector)
	}
}
