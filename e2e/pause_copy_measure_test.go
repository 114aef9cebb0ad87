//go:build measure

package e2e

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"
)

// TestPausedCopy is the measurement of issue 36's paused router during the initial snapshot, built only with
// the tag measure (go test -tags measure -run TestPausedCopy ./e2e/; about two minutes, not in CI). A router
// copying 300,000 rows with --lease 4s is paused (SIGSTOP) for 20 s while a second router stands by. The
// slot's lock lives on the paused router's replication connection, whose walsender does not stream during the
// copy, so wal_sender_timeout does not end it (ADR 0010, "What the fence does not cover"): the test reports
// how long the standby waited, and after the resume, that every row arrives with each aggregate's first
// deliveries in version order (the fence keeps the resumed copier from writing on).
func TestPausedCopy(t *testing.T) {
	const rows, pause, lease = 300_000, 20 * time.Second, 4 * time.Second
	e := newStreamEnv(t)
	c := e.consumeTimed(e.queue)
	w := newWriter(t, e.pgURL, 1000)
	w.prefill(rows, "")
	start := func() standbyRouter {
		addr := freeAddr(t)
		return standbyRouter{e.start("", "--http-addr", addr, "--lease", lease.String()), addr}
	}
	first := start()
	deadline := time.Now().Add(120 * time.Second)
	for done := int64(0); done < 10_000; {
		if time.Now().After(deadline) {
			t.Fatalf("snapshot progress stayed at %d rows:\n%s", done, tail(first.Output(), 20))
		}
		time.Sleep(100 * time.Millisecond)
		fmt.Sscan(e.scalar(`SELECT coalesce(max(rows_done), 0)::text FROM cdc_router.snapshots WHERE name = $1`, "initial:"+e.slot), &done)
	}
	second := start()
	if _, ok := waitState(t, second, "standby", 15*time.Second); !ok {
		t.Fatalf("the second router does not stand by:\n%s", tail(second.Output(), 20))
	}
	paused := time.Now()
	first.signal(syscall.SIGSTOP)
	t.Cleanup(func() { first.signal(syscall.SIGCONT) })
	took := time.Time{}
	for time.Since(paused) < pause && took.IsZero() {
		if _, h := second.health("/healthz"); h.State == "snapshot" || h.State == "streaming" {
			took = time.Now()
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !took.IsZero() {
		t.Logf("the standby took over %v after the copying router was paused (lease %v)", took.Sub(paused).Round(time.Millisecond), lease)
	} else {
		t.Logf("the standby did not take over during the %v pause (lease %v)", pause, lease)
	}
	resumed := time.Now()
	first.signal(syscall.SIGCONT)
	for took.IsZero() && time.Since(resumed) < 60*time.Second {
		for _, r := range []standbyRouter{first, second} {
			if _, h := r.health("/healthz"); h.State == "streaming" {
				took = time.Now()
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !took.IsZero() && took.After(resumed) {
		t.Logf("a router streamed %v after the resume", took.Sub(resumed).Round(time.Millisecond))
	}
	var ids []string
	if err := e.db.QueryRow(context.Background(), `SELECT array_agg(id::text) FROM outbox`).Scan(&ids); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(240 * time.Second)
	for {
		seen := map[string]bool{}
		for _, d := range c.snapshot() {
			seen[d.id] = true
		}
		missing := 0
		for _, id := range ids {
			if !seen[id] {
				missing++
			}
		}
		if missing == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d rows never arrived", missing, len(ids))
		}
		time.Sleep(200 * time.Millisecond)
	}
	got := c.snapshot()
	first1 := map[string]bool{}
	highest := map[string]int64{}
	inverted := 0
	for _, d := range got {
		if first1[d.id] {
			continue
		}
		first1[d.id] = true
		key := d.aggType + "/" + d.aggID
		if d.version < highest[key] {
			if inverted < 5 {
				t.Errorf("aggregate %s: version %d first delivered after version %d", key, d.version, highest[key])
			}
			inverted++
		}
		highest[key] = max(highest[key], d.version)
	}
	dups, _ := duplicates(deliveries(got))
	t.Logf("%d rows, %d deliveries (%d duplicates), %d first deliveries out of version order", len(ids), len(got), dups, inverted)
}
