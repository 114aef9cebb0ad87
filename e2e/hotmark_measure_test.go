//go:build measure

package e2e

import (
	"cmp"
	"os"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// TestKillsOnTheClockMakeProgress is the measurement of issue 36's kill case, built only with the tag
// measure (go test -tags measure -run TestKillsOnTheClockMakeProgress ./e2e/; about a minute, not in CI);
// HOT_MARK_KILL_EVERY (a Go duration) sets the time between kills, 2.3s as in the issue by default: one transaction of 30,000 events over 300
// aggregates, the router SIGKILLed on the clock and started again. The progress each process starts from
// (the stored record's confirmed events, from its log line "resuming inside a transaction") must grow: before,
// it was the count confirmed without a gap, which the slowest aggregate held back, and three consecutive
// processes delivered nothing new.
func TestKillsOnTheClockMakeProgress(t *testing.T) {
	s := cmp.Or(os.Getenv("HOT_MARK_KILL_EVERY"), "2.3s")
	every, err := time.ParseDuration(s)
	if err != nil {
		t.Fatalf("HOT_MARK_KILL_EVERY=%q: want a duration", s)
	}
	const rows, aggs = 30000, 300
	e := newStreamEnv(t)
	c := e.consume(e.queue)
	r := e.startStreaming()
	e.exec(`INSERT INTO outbox (id, aggregate_type, aggregate_id, aggregate_version, event_type, payload)
		SELECT gen_random_uuid(), 'account', 'a' || (g % $2::int), g / $2::int + 1, 'credited', jsonb_build_object('n', g)
		FROM generate_series(0, $1::int - 1) g`, rows, aggs)
	distinct := func() int {
		seen := map[string]bool{}
		for _, d := range c.snapshot() {
			seen[d.id] = true
		}
		return len(seen)
	}
	resumedFrom := regexp.MustCompile(`resuming inside a transaction.* (?:confirmed|skipped)=(\d+)`)
	var news, from []int
	stuck, before, last := 0, 0, 0
	for p := 0; p < 60 && before < rows; p++ {
		time.Sleep(every)
		r.signal(syscall.SIGKILL)
		r.wait(10 * time.Second)
		resumed := 0
		if m := resumedFrom.FindStringSubmatch(r.Output()); m != nil {
			resumed, _ = strconv.Atoi(m[1])
		}
		time.Sleep(300 * time.Millisecond) // the queue's backlog reaches the consumer
		now := distinct()
		news, from = append(news, now-before), append(from, resumed)
		if now == before && resumed <= last {
			stuck++
		} else {
			stuck = 0
		}
		if stuck >= 3 {
			t.Fatalf("three processes in a row delivered nothing new and resumed from no further (%d of %d delivered); "+
				"new per process %v, resumed from %v", now, rows, news, from)
		}
		before, last = now, max(last, resumed)
		r = e.start("")
	}
	got := c.snapshot()
	checkOrder(t, got)
	dups, _ := duplicates(got)
	t.Logf("%d events over %d aggregates, SIGKILL every %v: %d processes, new events per process %v, resumed from %v, "+
		"%d deliveries, %d duplicates", rows, aggs, every, len(news), news, from, len(got), dups)
	if before < rows {
		t.Errorf("%d of %d events delivered after %d processes", before, rows, len(news))
	}
}
