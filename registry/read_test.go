package registry

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/metrics"
)

// insert writes a record of another process as it would be found: started and last heard the given
// intervals ago (SQL, by the database's clock), stopped when stopped is not "".
func insert(t *testing.T, c *pgx.Conn, slot, instance, role, started, heard, stopped string) {
	t.Helper()
	exec(t, c, `INSERT INTO cdc_router.routers (slot, instance, role, publication, tables, started_at, heartbeat_at, stopped_at)
		VALUES ($1, $2, $3, 'p', '{public.outbox}', now() - $4::interval, now() - $5::interval,
			CASE WHEN $6 <> '' THEN now() - $6::interval END)`, slot, instance, role, started, heard, stopped)
}

// TestOfPrefersALiveStreamingRecord: Of speaks for a slot with its live streaming record over a live
// standby, a stale streaming one and a later stopped one; without a live record, with the most recently
// started; a slot without records has none.
func TestOfPrefersALiveStreamingRecord(t *testing.T) {
	_, c := migrated(t)
	insert(t, c, "s", "stopped", metrics.StateStreaming, "1 minute", "1 minute", "1 minute")
	insert(t, c, "s", "stale", metrics.StateStreaming, "1 hour", "1 minute", "")
	insert(t, c, "s", "standby", metrics.StateStandby, "2 hours", "2 seconds", "")
	insert(t, c, "s", "active", metrics.StateStreaming, "3 hours", "5 seconds", "")
	insert(t, c, "other", "other", metrics.StateStreaming, "0", "0", "")
	for _, want := range []string{"active", "standby", "stopped", "stale"} {
		rec, ok := of(t, c, "s")
		if !ok || rec.Instance != want {
			t.Fatalf("Of = %q (%v), want %q", rec.Instance, ok, want)
		}
		exec(t, c, `DELETE FROM cdc_router.routers WHERE instance = $1`, want)
	}
	if rec, ok := of(t, c, "s"); ok {
		t.Fatalf("Of of a slot without records = %+v", rec)
	}
	list, err := List(context.Background(), c, "cdc_router")
	if err != nil || len(list) != 1 || list[0].Slot != "other" {
		t.Fatalf("List = %+v, %v; want the other slot's record", list, err)
	}
}

// TestSpeaker: the rule of Of on records in memory.
func TestSpeaker(t *testing.T) {
	now := time.Now()
	stopped := now.Add(-time.Second)
	rec := func(instance, role string, started, heard time.Duration, stop *time.Time) Record {
		return Record{Slot: "s", Instance: instance, Role: role, StartedAt: now.Add(-started), HeartbeatAt: now.Add(-heard), StoppedAt: stop}
	}
	for _, c := range []struct {
		name string
		recs []Record
		want string
	}{
		{"none", nil, ""},
		{"snapshot over standby", []Record{rec("b", metrics.StateStandby, time.Minute, 0, nil),
			rec("a", metrics.StateSnapshot, time.Hour, time.Second, nil)}, "a"},
		{"live restarting over stopped streaming", []Record{rec("b", metrics.StateStreaming, time.Second, 0, &stopped),
			rec("a", metrics.StateRestarting, time.Hour, time.Second, nil)}, "a"},
		{"stale is not live", []Record{rec("b", metrics.StateStreaming, time.Hour, Stale+time.Second, nil),
			rec("a", metrics.StateStandby, 2*time.Hour, Stale-time.Second, nil)}, "a"},
		{"latest start among the silent", []Record{rec("b", metrics.StateStreaming, time.Hour, time.Hour, nil),
			rec("a", metrics.StateStandby, time.Minute, time.Minute, &stopped)}, "a"},
		{"another slot's", []Record{{Slot: "t", Instance: "x", HeartbeatAt: now}}, ""},
	} {
		got, ok := Speaker(c.recs, "s", now)
		if got.Instance != c.want || ok != (c.want != "") {
			t.Errorf("%s: Speaker = %q (%v), want %q", c.name, got.Instance, ok, c.want)
		}
	}
}

// TestKeepDeletesOnlySupersededRecords: a starting router deletes its slot's records of stopped processes
// and of processes silent for over a day, and keeps a live process's record of the slot (a standby's, a
// merely stale one's) and every record of other slots.
func TestKeepDeletesOnlySupersededRecords(t *testing.T) {
	url, c := migrated(t)
	insert(t, c, "s", "stopped", metrics.StateStopped, "1 hour", "1 hour", "1 hour")
	insert(t, c, "s", "gone", metrics.StateStreaming, "3 days", "25 hours", "")
	insert(t, c, "s", "live", metrics.StateStreaming, "1 hour", "1 second", "")
	insert(t, c, "s", "stale", metrics.StateStandby, "1 hour", "10 minutes", "")
	insert(t, c, "other", "stopped", metrics.StateStopped, "1 hour", "1 hour", "1 hour")
	k, _ := fastKeeper(url, "s", func() State { return State{Role: metrics.StateStandby} })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { k.run(ctx); close(done) }()
	until(t, 5*time.Second, "the slot's superseded records are not deleted", func() bool {
		var n int
		err := c.QueryRow(ctx, `SELECT count(*) FROM cdc_router.routers WHERE instance IN ('stopped', 'gone')`).Scan(&n)
		return err == nil && n == 1
	})
	cancel()
	<-done
	list, err := List(context.Background(), c, "cdc_router")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range list {
		got = append(got, r.Slot+":"+r.Instance)
	}
	want := map[string]bool{"s:" + k.rec.Instance: true, "s:live": true, "s:stale": true, "other:stopped": true}
	if len(got) != len(want) {
		t.Fatalf("records %v, want %v", got, want)
	}
	for _, g := range got {
		if !want[g] {
			t.Fatalf("records %v, want %v", got, want)
		}
	}
}
