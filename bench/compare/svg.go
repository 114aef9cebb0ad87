package main

import (
	"fmt"
	"math"
	"os"
	"strings"
)

// series is one line of a plot.
type series struct {
	name  string
	color string
	x, y  []float64
}

// plot is a line chart written as SVG by hand: axes, ticks, a legend and one polyline per series.
type plot struct {
	title, xlabel, ylabel string
	logX, logY            bool
	xmax                  float64 // on a linear x axis, at least this (plots one above the other share their axis)
	lines                 []series
}

const (
	svgW, svgH                     = 720, 440
	padL, padR, padT, padB float64 = 70, 160, 40, 50
)

func (p plot) write(path string) error { return writeSVG(path, p) }

// writeSVG writes the plots one above the other into one SVG file.
func writeSVG(path string, plots ...plot) error {
	var b strings.Builder
	h := svgH * len(plots)
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", svgW, h, svgW, h)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	for i, p := range plots {
		fmt.Fprintf(&b, `<g transform="translate(0 %d)">`+"\n", i*svgH)
		p.render(&b)
		b.WriteString("</g>\n")
	}
	b.WriteString("</svg>\n")
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// logRange rounds [lo, hi] out to powers of ten and returns a tick at each.
func logRange(lo, hi float64) (float64, float64, []float64) {
	lo, hi = math.Pow(10, math.Floor(math.Log10(lo))), math.Pow(10, math.Ceil(math.Log10(hi)))
	if hi <= lo {
		hi = lo * 10
	}
	var ticks []float64
	for v := lo; v <= hi*1.0001; v *= 10 {
		ticks = append(ticks, v)
	}
	return lo, hi, ticks
}

func (p plot) render(b *strings.Builder) {
	xmin, xmax, ymin, ymax := math.Inf(1), math.Inf(-1), math.Inf(1), 0.0
	for _, s := range p.lines {
		for i := range s.x {
			if (p.logX && s.x[i] <= 0) || (p.logY && s.y[i] <= 0) {
				continue
			}
			xmin, xmax = math.Min(xmin, s.x[i]), math.Max(xmax, s.x[i])
			ymin, ymax = math.Min(ymin, s.y[i]), math.Max(ymax, s.y[i])
		}
	}
	if math.IsInf(xmin, 0) {
		xmin, xmax, ymin, ymax = 0, 1, 1, 1
	}
	if ymax == 0 {
		ymax = 1
	}
	var xticks, yticks []float64
	if p.logX {
		xmin, xmax, xticks = logRange(xmin, xmax)
	} else {
		xmin = 0
		xmax, xticks = niceTicks(math.Max(xmax, p.xmax))
	}
	if p.logY {
		ymin, ymax, yticks = logRange(ymin, ymax)
	} else {
		ymin = 0
		ymax, yticks = niceTicks(ymax)
	}
	w, h := svgW-padL-padR, svgH-padT-padB
	sx := func(v float64) float64 {
		if p.logX {
			return padL + w*(math.Log10(v)-math.Log10(xmin))/(math.Log10(xmax)-math.Log10(xmin))
		}
		return padL + w*(v-xmin)/(xmax-xmin)
	}
	sy := func(v float64) float64 {
		if p.logY {
			return padT + h*(1-(math.Log10(v)-math.Log10(ymin))/(math.Log10(ymax)-math.Log10(ymin)))
		}
		return padT + h*(1-v/ymax)
	}

	fmt.Fprintf(b, `<text x="%g" y="22" font-size="15" text-anchor="middle">%s</text>`+"\n", padL+w/2, esc(p.title))
	for _, v := range xticks {
		x := sx(v)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%g" x2="%.1f" y2="%g" stroke="#ddd"/>`+"\n", x, padT, x, padT+h)
		fmt.Fprintf(b, `<text x="%.1f" y="%g" text-anchor="middle">%s</text>`+"\n", x, padT+h+16, num(v))
	}
	for _, v := range yticks {
		y := sy(v)
		fmt.Fprintf(b, `<line x1="%g" y1="%.1f" x2="%g" y2="%.1f" stroke="#ddd"/>`+"\n", padL, y, padL+w, y)
		fmt.Fprintf(b, `<text x="%g" y="%.1f" text-anchor="end">%s</text>`+"\n", padL-6, y+4, num(v))
	}
	fmt.Fprintf(b, `<rect x="%g" y="%g" width="%g" height="%g" fill="none" stroke="black"/>`+"\n", padL, padT, w, h)
	fmt.Fprintf(b, `<text x="%g" y="%g" text-anchor="middle">%s</text>`+"\n", padL+w/2, svgH-12.0, esc(p.xlabel))
	fmt.Fprintf(b, `<text x="16" y="%g" text-anchor="middle" transform="rotate(-90 16 %g)">%s</text>`+"\n", padT+h/2, padT+h/2, esc(p.ylabel))
	for i, s := range p.lines {
		var pts strings.Builder
		for j := range s.x {
			if (p.logX && s.x[j] <= 0) || (p.logY && s.y[j] <= 0) {
				continue
			}
			fmt.Fprintf(&pts, "%.1f,%.1f ", sx(s.x[j]), sy(s.y[j]))
		}
		fmt.Fprintf(b, `<polyline fill="none" stroke="%s" stroke-width="1.8" points="%s"/>`+"\n", s.color, strings.TrimSpace(pts.String()))
		ly := padT + 10 + float64(i)*20
		fmt.Fprintf(b, `<line x1="%g" y1="%g" x2="%g" y2="%g" stroke="%s" stroke-width="3"/>`+"\n", padL+w+12, ly, padL+w+32, ly, s.color)
		fmt.Fprintf(b, `<text x="%g" y="%g">%s</text>`+"\n", padL+w+38, ly+4, esc(s.name))
	}
}

// niceTicks rounds max up to a round number and returns about five ticks from 0 to it.
func niceTicks(max float64) (float64, []float64) {
	step := math.Pow(10, math.Floor(math.Log10(max/5)))
	for _, m := range []float64{1, 2, 5, 10} {
		if max/(step*m) <= 6 {
			step *= m
			break
		}
	}
	top := math.Ceil(max/step) * step
	var ticks []float64
	for v := 0.0; v <= top*1.0001; v += step {
		ticks = append(ticks, v)
	}
	return top, ticks
}

func num(v float64) string {
	if v != 0 && math.Abs(v) < 1 {
		return strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.3f", v), "0"), ".")
	}
	return fmt.Sprintf("%g", v)
}

func esc(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}
