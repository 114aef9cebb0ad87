package e2e

import (
	"regexp"
	"strconv"
	"testing"
	"time"
)

// TestSteadyTrafficShowsProgressAtInfo: a router under steady traffic used to log nothing at info level
// for minutes. It now writes one progress line per --progress-interval while events flow, with the count.
func TestSteadyTrafficShowsProgressAtInfo(t *testing.T) {
	e := newStreamEnv(t)
	c := e.consume(e.queue)
	r := e.startStreaming("--progress-interval", "1s")
	w := newWriter(t, e.pgURL, 5)
	w.write(200, 5, 10*time.Millisecond)
	c.waitFor(t, w.rows, 30*time.Second)
	r.waitLog("msg=progress", 5*time.Second)
	total := 0
	for _, m := range regexp.MustCompile(`level=INFO msg=progress .*?published=(\d+)`).FindAllStringSubmatch(r.Output(), -1) {
		n, _ := strconv.Atoi(m[1])
		total += n
	}
	if total == 0 || total > len(w.rows) {
		t.Errorf("progress lines count %d published events, want between 1 and %d:\n%s", total, len(w.rows), tail(r.Output(), 10))
	}
}
