package e2e

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/internal/cdc"
)

// restartLine is what the router logs each time its stream stops and restarts in-process.
const restartLine = "restarting from the acknowledged position"

// currentLSN is pg_current_wal_lsn(): a position after everything committed so far.
func (e *env) currentLSN() cdc.LSN {
	e.t.Helper()
	l, err := cdc.ParseLSN(e.scalar(`SELECT pg_current_wal_lsn()::text`))
	if err != nil {
		e.t.Fatal(err)
	}
	return l
}

// waitAckedTo waits until the acknowledged position reaches lsn: every row committed before it was then
// published and confirmed, or quarantined.
func (e *env) waitAckedTo(lsn cdc.LSN, timeout time.Duration) {
	e.t.Helper()
	deadline := time.Now().Add(timeout)
	for e.ackedPosition() < lsn {
		if time.Now().After(deadline) {
			e.t.Fatalf("acknowledged position %v never reached %v within %v", e.ackedPosition(), lsn, timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// quarantineRecords returns the event id of every record in cdc_router.quarantine (one test, one database),
// "" for a record without one.
func (e *env) quarantineRecords() []string {
	e.t.Helper()
	rows, err := e.db.Query(context.Background(), `SELECT coalesce(event_id, '') FROM cdc_router.quarantine ORDER BY id`)
	if err != nil {
		e.t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		e.t.Fatal(err)
	}
	return ids
}

// expectQuarantined checks that the quarantine holds exactly one record for each of ids, and no other.
func (e *env) expectQuarantined(ids ...string) {
	e.t.Helper()
	got := e.quarantineRecords()
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	seen := map[string]int{}
	for _, id := range got {
		seen[id]++
	}
	ok := len(got) == len(ids)
	for id := range want {
		ok = ok && seen[id] == 1
	}
	if !ok {
		e.t.Fatalf("%d quarantine records with event ids %q, want exactly one for each of the %d bad rows %q",
			len(got), got, len(ids), ids)
	}
}

// expectCleanLog checks what the router wrote: never a payload (marker is a text only the payloads of the
// bad rows hold) and no in-process restart.
func expectCleanLog(t testing.TB, r *router, marker string) {
	t.Helper()
	out := r.Output()
	if strings.Contains(out, marker) {
		t.Errorf("the router's log carries a payload (%q):\n%s", marker, tail(out, 20))
	}
	if n := strings.Count(out, restartLine); n > 0 {
		t.Errorf("the router restarted its stream %d times:\n%s", n, tail(out, 20))
	}
}

// copyOutbox writes n rows with one COPY (one transaction) and returns the good rows and the ids of the bad
// ones. Rows 100-104 have headers that are not an object; rows 600-604 an event_type that makes the routing
// key longer than AMQP's 255 bytes. Every bad row's payload holds marker.
func (e *env) copyOutbox(n int, marker string) (good []row, bad []string) {
	e.t.Helper()
	var b strings.Builder
	for i := 0; i < n; i++ {
		r := row{id: uuid(), aggType: "order", aggID: fmt.Sprintf("agg-%02d", i%20), version: int64(i/20 + 1)}
		eventType, payload, headers := "created", fmt.Sprintf(`{"n": %d}`, i), `{"k": "v"}`
		switch {
		case i >= 100 && i < 105:
			headers = `[1]`
		case i >= 600 && i < 605:
			eventType = strings.Repeat("e", 300)
		default:
			good = append(good, r)
		}
		if eventType != "created" || headers == `[1]` {
			payload = fmt.Sprintf(`{"secret": %q}`, marker)
			bad = append(bad, r.id)
		}
		fmt.Fprintf(&b, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", r.id, r.aggType, r.aggID, r.version, eventType, payload, headers)
	}
	tag, err := e.db.PgConn().CopyFrom(context.Background(), strings.NewReader(b.String()),
		`COPY outbox (id, aggregate_type, aggregate_id, aggregate_version, event_type, payload, headers) FROM STDIN`)
	if err != nil || tag.RowsAffected() != int64(n) {
		e.t.Fatalf("COPY: %v (%s)", err, tag)
	}
	return good, bad
}

// rewindSlot puts the env's slot back to where the slot saved (a pg_copy_logical_replication_slot copy)
// stood, and stores that position: what a router that crashed before storing any later position restarts
// from. The router must have exited.
func (e *env) rewindSlot(saved string) {
	e.t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err := e.db.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, e.slot)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("drop slot %s: %v", e.slot, err)
		}
		e.db.Exec(ctx, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1 AND active`, e.slot)
		time.Sleep(100 * time.Millisecond)
	}
	e.exec(`SELECT pg_copy_logical_replication_slot($1, $2)`, saved, e.slot)
	// A position from before the copy's transaction holds no progress inside it either: the stored mark may
	// be of that transaction (stored while it was being confirmed), and would make the replay skip its
	// first events, which is right after a real crash but not the state this rewind stands for.
	e.exec(`UPDATE cdc_router.positions SET lsn = (SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = $1),
		mark_commit_lsn = NULL, mark_xid = NULL, mark_done = NULL, mark_config = NULL WHERE slot = $1`, e.slot)
}

// waitDeliveredTwice waits until every row has been delivered at least twice.
func (c *consumer) waitDeliveredTwice(t testing.TB, rows []row, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		n := map[string]int{}
		for _, d := range c.snapshot() {
			n[d.id]++
		}
		missing := 0
		for _, r := range rows {
			if n[r.id] < 2 {
				missing++
			}
		}
		if missing == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d events were not delivered again within %v after the restart", missing, len(rows), timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestCopyWithTenBadRowsQuarantinesEachOnce: a COPY writes its rows in batches that share one WAL position
// (about 65 small rows per position), and every streamed row used to be quarantined under the key (slot,
// lsn, empty row_key), so ON CONFLICT DO NOTHING kept one bad row per batch and the others vanished without
// a trace: before the fix this test finds 3 records instead of 10. Each bad row now has its own record,
// stable across a replay of the COPY after a crash.
func TestCopyWithTenBadRowsQuarantinesEachOnce(t *testing.T) {
	e := newStreamEnv(t)
	c := e.consume(e.queue)
	r := e.startStreaming()
	// A kill cannot be timed to land after the COPY is processed but before its position is stored (the
	// router stores it within a second), so a copy of the slot taken now, before the COPY, stands in for
	// that crash: the restart below streams from it.
	saved := e.slot + "_before_copy"
	e.exec(`SELECT pg_copy_logical_replication_slot($1, $2)`, e.slot, saved)
	marker := "copy-secret-" + uuid()
	good, bad := e.copyOutbox(1000, marker)
	end := e.currentLSN()
	c.waitFor(t, good, 60*time.Second)
	e.waitAckedTo(end, 30*time.Second)
	got := c.snapshot()
	if len(got) != len(good) || len(unexpected(got, good)) != 0 {
		t.Fatalf("%d deliveries (%d not among the %d good rows), want exactly the %d good rows",
			len(got), len(unexpected(got, good)), len(good), len(good))
	}
	e.expectQuarantined(bad...)
	positions := e.scalar(`SELECT count(DISTINCT lsn)::text FROM cdc_router.quarantine`)
	if positions == "10" {
		t.Fatalf("the 10 bad rows have 10 distinct positions: this COPY did not put several at one position")
	}
	t.Logf("COPY of 1,000 rows: %d published, %d quarantined at %s distinct WAL positions", len(got), len(bad), positions)

	r.signal(syscall.SIGKILL)
	r.wait(10 * time.Second)
	e.rewindSlot(saved)
	if acked := e.ackedPosition(); acked >= end {
		t.Fatalf("the rewound position %v is not before the COPY (%v)", acked, end)
	}
	r2 := e.startStreaming()
	c.waitDeliveredTwice(t, good, 60*time.Second) // the replay went through the whole COPY
	e.waitAckedTo(end, 30*time.Second)
	e.expectQuarantined(bad...)
	t.Logf("after a restart from %v, before the COPY: every good row delivered again, still %d quarantine records",
		e.scalar(`SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1`, saved), len(bad))
	expectCleanLog(t, r, marker)
	expectCleanLog(t, r2, marker)
}

// TestSnapshotQuarantineKeysDoNotCollide: the initial snapshot keyed its quarantine records by
// "type/id/version", so ('a/b','c',1) and ('a','b/c',1) shared the key "a/b/c/1" and the second record was
// dropped by ON CONFLICT DO NOTHING: before the fix this test finds 1 record. Keys are now JSON arrays.
func TestSnapshotQuarantineKeysDoNotCollide(t *testing.T) {
	e := newStreamEnv(t)
	c := e.consume(e.queue)
	w := newWriter(t, e.pgURL, 10)
	w.prefill(200, "")
	marker := "snapshot-secret-" + uuid()
	first, second := uuid(), uuid()
	e.exec(`INSERT INTO outbox (id, aggregate_type, aggregate_id, aggregate_version, event_type, payload, headers)
		VALUES ($1, 'a/b', 'c', 1, 'created', jsonb_build_object('secret', $3::text), '[1]'),
		       ($2, 'a', 'b/c', 1, 'created', jsonb_build_object('secret', $3::text), '[1]')`, first, second, marker)
	r := e.startStreaming() // streaming begins after the initial snapshot
	got := c.waitFor(t, w.rows, 60*time.Second)
	if len(got) != len(w.rows) || len(unexpected(got, w.rows)) != 0 {
		t.Errorf("%d deliveries, want exactly the %d good rows", len(got), len(w.rows))
	}
	e.expectQuarantined(first, second)
	keys := e.scalar(`SELECT string_agg(row_key, ' ' ORDER BY row_key) FROM cdc_router.quarantine`)
	t.Logf("snapshot quarantine keys: %s", keys)
	expectCleanLog(t, r, marker)
}

// TestQuarantineReplayReadsTheRecordsOwnTable: a record of the second --table of a router, replayed
// after its row was fixed in that table, is published from that row. replay used to look the row up in
// --table (public.outbox), report it gone, and publish the stored, unfixed values.
func TestQuarantineReplayReadsTheRecordsOwnTable(t *testing.T) {
	e := twoOutboxes(t, true)
	c := e.consume(e.queue)
	r := e.startStreaming("--table", "public.outbox", "--table", "public.outbox_b", "--snapshot", "never",
		"--max-payload-bytes", "100")
	id := uuid()
	e.exec(`INSERT INTO outbox_b (id, aggregate_type, aggregate_id, aggregate_version, event_type, payload)
		VALUES ($1, 'order', 'b-1', 1, 'created', jsonb_build_object('s', repeat('x', 200)))`, id)
	e.waitQuarantined(1, 30*time.Second)
	stopRouter(t, r)
	if table := e.scalar(`SELECT table_name FROM cdc_router.quarantine WHERE event_id = $1`, id); table != "public.outbox_b" {
		t.Fatalf("record of the second table names %q", table)
	}
	e.exec(`UPDATE outbox_b SET payload = '{"fixed": true}' WHERE id = $1`, id)
	out, code := e.cli("quarantine", "replay", "--exchange", e.exchange, e.recordID(id))
	want := fmt.Sprintf("replayed from the outbox table: event %s published to %s (routing key order.created)", id, e.exchange)
	if code != 0 || !strings.Contains(out, want) {
		t.Fatalf("replay of a record of public.outbox_b: exit %d, want %q\n%s", code, want, out)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		var got []delivery
		for _, d := range c.snapshot() {
			if d.id == id {
				got = append(got, d)
			}
		}
		if len(got) == 1 && string(got[0].msg.Body) == `{"fixed": true}` && got[0].msg.Headers["x-replayed"] == true {
			break
		}
		if len(got) > 0 || time.Now().After(deadline) {
			var bodies []string
			for _, d := range got {
				bodies = append(bodies, string(d.msg.Body))
			}
			t.Fatalf("deliveries of the replayed event: %q, want one with the fixed payload", bodies)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestQuarantineReplayRetriesARefusalForRefusalRetry: a replayed message that a queue bound to the
// exchange nacks (x-overflow=reject-publish) is tried again for --refusal-retry, each try reported,
// then its record is left open with the broker's reason, and a record after it is still replayed; once
// the queue is gone, a replay with a longer --refusal-retry that began while it still refused succeeds.
// replay used to take --refusal-retry and ignore it, and ended the whole run at the first nack.
func TestQuarantineReplayRetriesARefusalForRefusalRetry(t *testing.T) {
	e := newStreamEnv(t)
	c := e.consume(e.queue)
	r := e.startStreaming()
	refused := e.quarantineRow("refused", `jsonb_build_object('s', repeat('x', 300))`, `'[1]'`)
	small := e.quarantineRow("small", `'{}'`, `'[2]'`)
	e.waitQuarantined(2, 30*time.Second)
	stopRouter(t, r)
	e.exec(`UPDATE outbox SET headers = '{}' WHERE id IN ($1, $2)`, refused, small)
	narrow := e.smallQueue(250) // nacks the refused row's message (over 300 bytes), takes the small one's

	from := time.Now()
	out, code := e.cli("quarantine", "replay", "--exchange", e.exchange, "--refusal-retry", "2s",
		e.recordID(refused), e.recordID(small))
	took := time.Since(from)
	if code != 1 || !strings.Contains(out, "trying again in") || !strings.Contains(out, "still refused by RabbitMQ") ||
		!strings.Contains(out, "nack") || !strings.Contains(out, "event "+small+" published") {
		t.Fatalf("replay against the narrow queue: exit %d after %s, want 1 with retries, the refused record left "+
			"open and the small one replayed:\n%s", code, took.Round(time.Millisecond), out)
	}
	if took < 2*time.Second || took > 15*time.Second {
		t.Errorf("replay took %s, want about --refusal-retry 2s", took.Round(time.Millisecond))
	}
	if open := e.scalar(`SELECT count(*) FROM cdc_router.quarantine WHERE event_id = $1 AND handled_at IS NULL`, refused); open != "1" {
		t.Errorf("the refused record is not open any more (%s open records of it)", open)
	}

	type result struct {
		out  string
		code int
	}
	done := make(chan result, 1)
	go func() {
		out, code := e.cli("quarantine", "replay", "--exchange", e.exchange, "--refusal-retry", "1m", e.recordID(refused))
		done <- result{out, code}
	}()
	time.Sleep(1500 * time.Millisecond) // it is refused, and retrying, meanwhile
	if _, err := e.channel().QueueDelete(narrow, false, false, false); err != nil {
		t.Fatal(err)
	}
	select {
	case res := <-done:
		if res.code != 0 || !strings.Contains(res.out, "trying again in") || !strings.Contains(res.out, "event "+refused+" published") {
			t.Fatalf("replay while the refusal ended: exit %d, want 0 after a retry:\n%s", res.code, res.out)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("replay did not end within 30 s of the refusing queue's deletion")
	}
	firstDeliveries(t, c, []string{small, refused}, 10*time.Second)
}
