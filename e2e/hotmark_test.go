package e2e

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// hotMarkShape is the size of TestHotAggregateDuplicatesPerFaultAreBounded's transaction and the time
// between its faults; HOT_MARK_ROWS and HOT_MARK_EVERY (a Go duration) override them for the long
// measurement of docs/guarantee.md (60,000 rows, 8s). HOT_MARK_FAULTS (cut, kill or both) chooses the
// faults, HOT_MARK_FLAGS adds router flags (such as --aggregate-window 16).
func hotMarkShape(t *testing.T) (rows int, every time.Duration) {
	rows, every = 8000, time.Second
	if s := os.Getenv("HOT_MARK_ROWS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 2 {
			t.Fatalf("HOT_MARK_ROWS=%q: want a number of rows, at least 2", s)
		}
		rows = n
	}
	if s := os.Getenv("HOT_MARK_EVERY"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("HOT_MARK_EVERY=%q: want a duration such as 8s", s)
		}
		every = d
	}
	return rows, every
}

// TestHotAggregateDuplicatesPerFaultAreBounded (issue 36, finding 3): one transaction whose every other row
// is the next version of one hot aggregate and whose other rows are one event each of an aggregate of their
// own. The one-event aggregates are all confirmed within a second or two; the hot one moves at one event per
// confirm (ADR 0006), its later events held (ADR 0009). Faults come while it drains, alternately a cut of
// the router's PostgreSQL connections (a restart inside the process) and a SIGKILL (a restart from the
// stored record). The progress kept inside the transaction is what is confirmed, not only its gap-free
// prefix (which stops at the hot aggregate's first unconfirmed event): a one-event aggregate confirmed
// before a fault is not published again after it, beyond the in-flight window (--lanes 2 × --window 64
// here) per fault. Before, every fault published again every one-event aggregate after the hot aggregate's
// position (thousands per fault). Every event arrives, first deliveries in version order.
func TestHotAggregateDuplicatesPerFaultAreBounded(t *testing.T) {
	rows, every := hotMarkShape(t)
	const window = 2 * 64
	flags := append([]string{"--lanes", "2", "--window", "64"}, strings.Fields(os.Getenv("HOT_MARK_FLAGS"))...)
	e := newStreamEnv(t)
	c := e.consume(e.queue)
	proxy, viaProxy := e.pgProxy()
	r := e.startVia(viaProxy, "", flags...)
	r.waitLog("msg=streaming ", 30*time.Second)
	e.exec(`INSERT INTO outbox (id, aggregate_type, aggregate_id, aggregate_version, event_type, payload)
		SELECT gen_random_uuid(), 'account', CASE WHEN g % 2 = 1 THEN 'hot' ELSE 'cold-' || g END,
			CASE WHEN g % 2 = 1 THEN (g + 1) / 2 ELSE 1 END, 'credited', jsonb_build_object('n', g)
		FROM generate_series(1, $1::int) g`, rows)
	hot, cold := (rows+1)/2, rows/2
	count := func() (hotSeen, coldSeen, coldDeliveries, all int) {
		got := c.snapshot()
		seen := map[string]bool{}
		for _, d := range got {
			if d.aggID != "hot" {
				coldDeliveries++
			}
			if seen[d.id] {
				continue
			}
			seen[d.id] = true
			if d.aggID == "hot" {
				hotSeen++
			} else {
				coldSeen++
			}
		}
		return hotSeen, coldSeen, coldDeliveries, len(got)
	}
	deadline := time.Now().Add(60 * time.Second)
	for _, coldSeen, _, _ := count(); coldSeen < cold; _, coldSeen, _, _ = count() {
		if time.Now().After(deadline) {
			t.Fatalf("%d of the %d one-event aggregates delivered within 60 s", coldSeen, cold)
		}
		time.Sleep(20 * time.Millisecond)
	}
	kinds := []string{"PostgreSQL cut", "SIGKILL"}
	switch os.Getenv("HOT_MARK_FAULTS") {
	case "", "both":
	case "cut":
		kinds = kinds[:1]
	case "kill":
		kinds = kinds[1:]
	default:
		t.Fatalf("HOT_MARK_FAULTS=%q: want cut, kill or both", os.Getenv("HOT_MARK_FAULTS"))
	}
	type fault struct {
		kind        string
		hotSeen     int
		dups        int // deliveries beyond the first of each event when the fault came
		coldRepeats int // of them, of one-event aggregates
	}
	var faults []fault
	// The first fault comes at once, with most of the hot aggregate still behind: on a fast machine it drains
	// within a few seconds.
	next, atFault := time.Now(), 0
	deadline = time.Now().Add(10*time.Minute + time.Duration(rows/1000)*every)
	for {
		hotSeen, coldSeen, coldDeliveries, all := count()
		if hotSeen == hot {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %d faults: %d of the hot aggregate's %d events delivered", len(faults), hotSeen, hot)
		}
		if time.Now().After(next) && hotSeen > atFault {
			f := fault{kind: kinds[len(faults)%len(kinds)], hotSeen: hotSeen, dups: all - hotSeen - coldSeen,
				coldRepeats: coldDeliveries - cold}
			streams := strings.Count(r.Output(), "msg=streaming ")
			if f.kind == "SIGKILL" {
				r.signal(syscall.SIGKILL)
				r.wait(10 * time.Second)
				r, streams = e.startVia(viaProxy, "", flags...), 0
			} else {
				proxy.Cut()
			}
			faults = append(faults, f)
			// The next fault comes once the router streams again and then delivers an event of the hot
			// aggregate it had not delivered: the duplicates this fault causes (the hot aggregate goes in
			// order) have then arrived, not those still to come from a replay that had not begun yet.
			for wait := time.Now().Add(60 * time.Second); strings.Count(r.Output(), "msg=streaming ") <= streams; {
				if time.Now().After(wait) {
					t.Fatalf("the router did not stream again within 60 s after a %s", f.kind)
				}
				time.Sleep(20 * time.Millisecond)
			}
			atFault, _, _, _ = count()
			next = time.Now().Add(every)
			if kinds[len(faults)%len(kinds)] == "SIGKILL" {
				// A SIGKILL replays from the stored record, written once a second: what was
				// confirmed since its last write is published again, as docs/guarantee.md says, however
				// small the window. The kill comes once the process that streams again has written it at
				// least once, so that this counts what the window bounds, not the store's period (one CI run
				// here under load killed 1 s after a cut, before any write: 4,000 one-event aggregates again).
				next = time.Now().Add(max(every, 2500*time.Millisecond))
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond) // the last deliveries of a replay in progress
	got := c.snapshot()
	checkOrder(t, got)
	dups, _ := duplicates(got)
	_, _, coldDeliveries, all := count()
	n := max(len(faults), 1)
	perKind := map[string][]int{}
	for i, f := range faults {
		// The duplicates a fault causes arrive before the next fault: the next one comes only once the hot
		// aggregate, which goes in order, delivered an event it had not delivered before.
		after, coldAfter := dups, coldDeliveries-cold
		if i+1 < len(faults) {
			after, coldAfter = faults[i+1].dups, faults[i+1].coldRepeats
		}
		perKind[f.kind] = append(perKind[f.kind], after-f.dups)
		t.Logf("fault %d: %s with %d hot events delivered: %d duplicates after it, %d of them of one-event aggregates",
			i+1, f.kind, f.hotSeen, after-f.dups, coldAfter-f.coldRepeats)
	}
	t.Logf("%d events (%d of one hot aggregate), faults %v: %d deliveries, %d duplicates (%d per fault), %d of them "+
		"of one-event aggregates (%d per fault); duplicates per fault by kind: %v", rows, hot, len(faults), all, dups,
		dups/n, coldDeliveries-cold, (coldDeliveries-cold)/n, perKind)
	if len(faults) == 0 {
		t.Fatalf("no fault while the hot aggregate drained: the test measured nothing")
	}
	if repeats := coldDeliveries - cold; repeats > len(faults)*window {
		t.Errorf("%d deliveries again of one-event aggregates confirmed before the faults, over %d faults: want at most "+
			"the in-flight window (%d) per fault", repeats, len(faults), window)
	}
	// A restart inside the process resumes from the progress the session ended with: what was in flight, and
	// what was confirmed in the last moments (the mark of many held events is listed every 20 ms).
	for _, d := range perKind["PostgreSQL cut"] {
		if d > window {
			t.Errorf("a PostgreSQL cut caused %d duplicates, want at most the in-flight window (%d)", d, window)
		}
	}
}

// TestPostgresFailureAfterTheLastConfirmDoesNotRepublish (issue 36, the harness's open list): a PostgreSQL
// failure right after a long transaction's last confirm, before the status update and the stored position
// reached PostgreSQL, no longer publishes the transaction again: the next session starts past the position
// the broker confirmed. The router's PostgreSQL connections go through a proxy, paused while the
// transaction is being delivered (nothing the router says reaches PostgreSQL), and cut once every event of
// it was delivered. Before, the next session started before the transaction, whose progress mark had ended
// with it, and delivered all of it again.
func TestPostgresFailureAfterTheLastConfirmDoesNotRepublish(t *testing.T) {
	const n = 1000
	e := newStreamEnv(t)
	c := e.consume(e.queue)
	proxy, viaProxy := e.pgProxy()
	r := e.startVia(viaProxy, "")
	r.waitLog("msg=streaming ", 30*time.Second)
	e.insertRun(n, "long", false) // one aggregate: one event per confirm round trip, so it takes a while
	last := e.scalar(`SELECT id::text FROM outbox WHERE aggregate_id = 'long' AND aggregate_version = $1`, n)
	// The router read the whole transaction (its last event is held behind the others) before PostgreSQL
	// hears nothing more from it: the session then waits on its stored position, and fails within 10 s.
	r.waitLog("event_id="+last, 30*time.Second)
	proxy.Pause()
	paused := len(c.snapshot())
	c.waitCount(t, n, 60*time.Second)
	time.Sleep(300 * time.Millisecond) // the last confirm reaches the router
	proxy.Cut()
	r.waitLog("stream stopped; restarting", 30*time.Second)
	e.insertRun(1, "after", false)
	deadline := time.Now().Add(60 * time.Second)
	for after := false; !after; {
		got := c.snapshot()
		for _, d := range got {
			after = after || d.aggID == "after"
		}
		if after {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the event committed after the failure not delivered within 60 s (%d deliveries)", len(got))
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond)
	got := c.snapshot()
	checkOrder(t, got)
	dups, _ := duplicates(got)
	t.Logf("%d events, PostgreSQL paused at %d delivered and cut once all were: %d deliveries, %d duplicates", n, paused,
		len(got), dups)
	if dups > 5 {
		t.Errorf("%d duplicates: the transaction confirmed before the failure was published again", dups)
	}
}
