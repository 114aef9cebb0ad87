package e2e

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cdc-router/cdc-router/internal/testenv"
)

// TestPostgresSilentPartition stops forwarding between the router and PostgreSQL without closing the
// sockets (a stalled server or a silent partition) for longer than --pg-timeout, on an idle stream while a
// writer then commits, and in the middle of a stream under load (TestPostgresSilentPartitionUnderLoad).
// Within the bound plus slack the router logs a restart naming PostgreSQL with cause postgres, and every
// connection attempt through the silent forwarder ends within the bound too: the restart counter (cause
// postgres, never other) goes on growing, /readyz is 503 with a problem that names the PostgreSQL it waits
// for (on the idle stream already before the restart, once the stream's request for a reply has gone
// unanswered), and the lag grows although no received event is unconfirmed. Once forwarding resumes every committed
// event arrives, in order.
func TestPostgresSilentPartition(t *testing.T) { silentPartition(t, false) }

// TestPostgresSilentPartitionUnderLoad is TestPostgresSilentPartition with the pause in the middle of a
// stream of about 200 events a second.
func TestPostgresSilentPartitionUnderLoad(t *testing.T) { silentPartition(t, true) }

func silentPartition(t *testing.T, underLoad bool) {
	const bound = 5 * time.Second
	e := newStreamEnv(t)
	c := e.consume(e.queue)
	p := testenv.NewProxy(t, fmt.Sprintf("127.0.0.1:%d", pg.Port))
	direct := e.pgURL
	e.pgURL = strings.Replace(direct, fmt.Sprintf("127.0.0.1:%d", pg.Port), p.Addr, 1)
	addr := freeAddr(t)
	r := e.start("", "--http-addr", addr, "--pg-timeout", bound.String())
	e.pgURL = direct
	r.waitLog("msg=streaming ", 30*time.Second)
	w := newWriter(t, e.pgURL, 20)
	restarts := func(s scrape, cause string) float64 {
		return s.value(t, `cdc_router_stream_restarts_total{cause="`+cause+`"}`)
	}
	var before scrape
	var from int // the log's length at the pause
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Add(1)
	if underLoad {
		before = scrapeMetrics(t, addr)
		go func() { defer wg.Done(); w.write(2000, 10, 20*time.Millisecond) }() // through the pause
		for deadline := time.Now().Add(30 * time.Second); len(c.snapshot()) < 200; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("only %d events arrived in 30 s", len(c.snapshot()))
			}
		}
		p.Pause()
		from = len(r.Output())
	} else {
		w.write(100, 10, 0)
		c.waitFor(t, w.rows, 30*time.Second)
		before = scrapeMetrics(t, addr)
		// Idle: the position of the last event is stored (every second), so what the router notices first is
		// the silence of the stream itself (a ping after half the bound, unanswered), not a stored-position write.
		time.Sleep(3 * time.Second)
		p.Pause()
		from = len(r.Output())
		go func() { defer wg.Done(); w.write(300, 5, 50*time.Millisecond) }() // committed while the router cannot read WAL
	}
	paused := time.Now()
	if !underLoad {
		// Before the router takes the connection as dead (--pg-timeout), /readyz says that PostgreSQL has
		// not answered the stream's request for a reply: a readiness probe hears of the silence after
		// about half the bound, not all of it.
		for {
			code, body := get(t, "http://"+addr+"/readyz")
			if code == 503 && strings.Contains(body, "has not answered the stream's request for a reply") {
				t.Logf("/readyz 503 %v after the pause: %s", time.Since(paused).Round(100*time.Millisecond), body)
				break
			}
			if strings.Contains(r.Output()[from:], "stream stopped; restarting") {
				t.Fatalf("the router restarted on the silence before /readyz said PostgreSQL had not answered (last /readyz %d %s)", code, body)
			}
			if time.Since(paused) > bound+10*time.Second {
				t.Fatalf("/readyz never said PostgreSQL had not answered within %v of the pause", time.Since(paused))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	warned := func() bool {
		out := r.Output()[from:]
		i := strings.Index(out, "stream stopped; restarting")
		if i < 0 {
			return false
		}
		line := out[i:]
		if j := strings.IndexByte(line, '\n'); j >= 0 {
			line = line[:j]
		}
		if !strings.Contains(line, "cause=postgres") || !strings.Contains(line, "PostgreSQL at "+p.Addr) {
			t.Fatalf("the first restart after the pause does not name PostgreSQL at %s with cause postgres: %s", p.Addr, line)
		}
		return true
	}
	for !warned() {
		if time.Since(paused) > bound+15*time.Second {
			t.Fatalf("no restart naming PostgreSQL (cause postgres) within %v of the pause:\n%s", time.Since(paused), tail(r.Output(), 30))
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("silence detected after %v", time.Since(paused).Round(100*time.Millisecond))
	// Every later attempt ends within the bound: the counter goes on growing, the lag grows, /readyz says why.
	s := waitMetric(t, addr, "two more restarts with cause postgres and a lag beyond the bound", 4*bound+20*time.Second, func(s scrape) bool {
		return restarts(s, "postgres") >= restarts(before, "postgres")+3 && s.value(t, "cdc_router_replication_lag_seconds") > bound.Seconds()
	})
	t.Logf("after %v: %v restarts with cause postgres, lag %.1f s", time.Since(paused).Round(100*time.Millisecond),
		restarts(s, "postgres")-restarts(before, "postgres"), s.value(t, "cdc_router_replication_lag_seconds"))
	if n := restarts(s, "other") - restarts(before, "other"); n != 0 {
		t.Errorf("%v restarts counted with cause other during a PostgreSQL partition", n)
	}
	time.Sleep(time.Second)
	if later := scrapeMetrics(t, addr).value(t, "cdc_router_replication_lag_seconds"); later <= s.value(t, "cdc_router_replication_lag_seconds") {
		t.Errorf("lag %v s a second after %v s: it does not grow while the router cannot read WAL", later,
			s.value(t, "cdc_router_replication_lag_seconds"))
	}
	if checked := s.value(t, "cdc_router_slot_health_checked_timestamp_seconds"); checked > float64(paused.Unix()+1) {
		t.Errorf("the slot health was read at %v, after the pause began (%v): it cannot have been", checked, paused.Unix())
	}
	code, body := get(t, "http://"+addr+"/readyz")
	if code != 503 || !strings.Contains(body, `"problem":"waiting`) || !strings.Contains(body, "PostgreSQL at "+p.Addr) {
		t.Errorf("/readyz = %d %s during the partition, want 503 with a problem naming PostgreSQL at %s", code, body, p.Addr)
	}

	p.Resume()
	resumed := time.Now()
	wg.Wait()
	expectEveryEventInOrder(t, c, w, "silent PostgreSQL partition", 90*time.Second)
	t.Logf("every event arrived %v after forwarding resumed", time.Since(resumed).Round(100*time.Millisecond))
	waitMetric(t, addr, "the lag back to 0 after the partition", 60*time.Second, func(s scrape) bool {
		return s.value(t, "cdc_router_replication_lag_seconds") == 0
	})
}

// TestStartIntoASilentPostgreSQLLogsTheWait starts the router through a forwarder that passes nothing (a
// stalled server or a silent partition) with --pg-timeout 30s: the first attempt ends only after the bound,
// but within about a third of it (10 s) the log has a warning that names what the router waits for (seed
// 7049 of the harness: 32.6 s of 503 without a line), while /readyz is 503 with the same wait. Once
// forwarding resumes, the router streams.
func TestStartIntoASilentPostgreSQLLogsTheWait(t *testing.T) {
	e := newStreamEnv(t)
	c := e.consume(e.queue)
	p := testenv.NewProxy(t, fmt.Sprintf("127.0.0.1:%d", pg.Port))
	p.Pause()
	direct := e.pgURL
	e.pgURL = strings.Replace(direct, fmt.Sprintf("127.0.0.1:%d", pg.Port), p.Addr, 1)
	addr := freeAddr(t)
	began := time.Now()
	r := e.start("", "--http-addr", addr, "--pg-timeout", "30s")
	e.pgURL = direct
	want := "still waiting for PostgreSQL at " + p.Addr
	if !r.WaitOutput(want, 15*time.Second) {
		t.Fatalf("no %q in the router's log 15 s after its start into a silent PostgreSQL:\n%s", want, tail(r.Output(), 20))
	}
	out := r.Output()
	line := out[strings.Index(out, want):]
	line = line[:strings.IndexByte(line+"\n", '\n')]
	t.Logf("after %v: %s", time.Since(began).Round(100*time.Millisecond), line)
	if !strings.Contains(line, "level=WARN") && !strings.Contains(out[max(0, strings.Index(out, want)-80):strings.Index(out, want)], "level=WARN") {
		t.Errorf("the wait is not logged as a warning: %s", line)
	}
	if !strings.Contains(line, "--pg-timeout 30s") {
		t.Errorf("the wait's line does not name its bound (--pg-timeout 30s): %s", line)
	}
	if code, body := get(t, "http://"+addr+"/readyz"); code != 503 || !strings.Contains(body, "PostgreSQL at "+p.Addr) {
		t.Errorf("/readyz = %d %s while the router waits, want 503 naming PostgreSQL at %s", code, body, p.Addr)
	}
	p.Resume()
	r.waitLog("msg=streaming ", 30*time.Second)
	w := newWriter(t, e.pgURL, 20)
	w.write(20, 5, 0)
	expectEveryEventInOrder(t, c, w, "a start into a silent PostgreSQL", 30*time.Second)
}
