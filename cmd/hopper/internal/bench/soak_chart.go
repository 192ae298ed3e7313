package bench

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// The soak's chart: an SVG of two panels over the run's minutes, the
// tables' sizes above and the rate worked below. Plain SVG written by
// hand: three polylines and their axes need no charting library.

const (
	chartWidth  = 760
	panelHeight = 220
	chartLeft   = 70 // room for the y labels
	chartRight  = 150
	chartTop    = 30
	panelGap    = 60
)

var chartColours = []string{"#1f77b4", "#d62728", "#2ca02c", "#9467bd"}

// chartSeries is one line of a panel.
type chartSeries struct {
	name string
	ys   []float64
}

func writeSoakChart(out io.Writer, r *SoakResult) error {
	w := bufio.NewWriter(out)
	xs := make([]float64, len(r.Samples))
	for i, smp := range r.Samples {
		xs[i] = smp.Seconds / 60
	}
	var sizes []chartSeries
	for ti, name := range soakTables {
		s := chartSeries{name: shortTable(name) + " (MiB)"}
		for _, smp := range r.Samples {
			v := 0.0
			if ti < len(smp.Tables) {
				v = float64(smp.Tables[ti].Bytes()) / (1 << 20)
			}
			s.ys = append(s.ys, v)
		}
		sizes = append(sizes, s)
	}
	rate := chartSeries{name: "worked (jobs/s)"}
	for i, smp := range r.Samples {
		if i == 0 {
			continue // no rate before the first interval
		}
		rate.ys = append(rate.ys, smp.WorkedPerSecond)
	}
	height := chartTop + 2*panelHeight + panelGap + 40
	fmt.Fprintf(w, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		chartWidth, height, chartWidth, height)
	fmt.Fprintf(w, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(w, `<text x="%d" y="18" font-size="14">Soak: table sizes and jobs worked per second, by minute</text>`+"\n", chartLeft)
	xmax := 0.0
	if len(xs) > 0 {
		xmax = xs[len(xs)-1]
	}
	panel(w, chartTop, xs, xmax, sizes)
	if len(xs) > 1 {
		panel(w, chartTop+panelHeight+panelGap, xs[1:], xmax, []chartSeries{rate})
	}
	fmt.Fprintf(w, `<text x="%d" y="%d" text-anchor="middle">minutes</text>`+"\n", chartLeft+(chartWidth-chartLeft-chartRight)/2, height-8)
	fmt.Fprintln(w, `</svg>`)
	return w.Flush()
}

// panel draws series against xs (minutes) in a panel whose top is at top:
// a frame, four grid lines with their values, the lines and a legend.
func panel(w *bufio.Writer, top int, xs []float64, xmax float64, series []chartSeries) {
	plotW, plotH := float64(chartWidth-chartLeft-chartRight), float64(panelHeight)
	ymax := 0.0
	for _, s := range series {
		for _, y := range s.ys {
			ymax = math.Max(ymax, y)
		}
	}
	ymax = niceCeil(ymax)
	if xmax <= 0 {
		xmax = 1
	}
	px := func(x float64) float64 { return chartLeft + plotW*x/xmax }
	py := func(y float64) float64 { return float64(top) + plotH*(1-y/ymax) }
	fmt.Fprintf(w, `<rect x="%d" y="%d" width="%.0f" height="%.0f" fill="none" stroke="#888"/>`+"\n", chartLeft, top, plotW, plotH)
	for i := 0; i <= 4; i++ {
		y := ymax * float64(i) / 4
		fmt.Fprintf(w, `<line x1="%d" x2="%.0f" y1="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", chartLeft, chartLeft+plotW, py(y), py(y))
		fmt.Fprintf(w, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", chartLeft-6, py(y)+4, chartNumber(y))
	}
	for i := 0; i <= 4; i++ {
		x := xmax * float64(i) / 4
		fmt.Fprintf(w, `<text x="%.1f" y="%.0f" text-anchor="middle">%s</text>`+"\n", px(x), float64(top)+plotH+16, chartNumber(x))
	}
	for si, s := range series {
		colour := chartColours[si%len(chartColours)]
		var pts []string
		for i, y := range s.ys {
			if i < len(xs) {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(xs[i]), py(y)))
			}
		}
		fmt.Fprintf(w, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", colour, strings.Join(pts, " "))
		ly := top + 14 + 18*si
		fmt.Fprintf(w, `<line x1="%.0f" x2="%.0f" y1="%d" y2="%d" stroke="%s" stroke-width="2"/>`+"\n",
			chartLeft+plotW+10, chartLeft+plotW+30, ly-4, ly-4, colour)
		fmt.Fprintf(w, `<text x="%.0f" y="%d">%s</text>`+"\n", chartLeft+plotW+36, ly, s.name)
	}
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten (1 for nothing).
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

// chartNumber is an axis label: at most two decimals, no trailing zeros.
func chartNumber(v float64) string {
	return strconv.FormatFloat(math.Round(v*100)/100, 'f', -1, 64)
}
