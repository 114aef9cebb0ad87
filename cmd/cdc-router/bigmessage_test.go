package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestLargeMessagesAreJudgedFromTheirHeader: with --message-prefix, a 300 MiB logical decoding message with
// another prefix and one with the router's prefix (over the envelope limit) are judged from their headers and
// discarded while they are read: the event written after them arrives, the one with the prefix is quarantined
// with its size and no content, and the router's peak RSS stays under 64 MiB above its idle RSS. Before the
// fix pgconn read each message whole before the prefix was looked at (200 MiB: 223 MB of RSS; 300 MiB under
// a 2 GB address-space cap: out of memory at every restart).
func TestLargeMessagesAreJudgedFromTheirHeader(t *testing.T) {
	const prefix = "cdc-router.outbox"
	const size = 300 << 20
	e := newStreamEnv(t)
	c := e.consume(e.queue)
	r := e.startPlain("", "--message-prefix", prefix)
	idle := peakRSS(r.cmd.Process.Pid)
	began := time.Now()
	e.exec(`SELECT pg_logical_emit_message(true, 'someone-else', repeat('x', $1))`, size)
	e.exec(`SELECT pg_logical_emit_message(true, $1, repeat('x', $2))`, prefix, size)
	emitted := time.Since(began)
	w := newWriter(t, e.pgURL, 3)
	w.write(5, 5, 0)
	c.waitFor(t, w.rows, 2*time.Minute)
	e.waitAckedTo(e.currentLSN(), time.Minute)
	took := time.Since(began)
	rss := peakRSS(r.cmd.Process.Pid)
	t.Logf("two %d MiB messages emitted in %v, read and the event after them delivered in %v; router RSS idle %.1f MiB, "+
		"peak %.1f MiB", size>>20, emitted.Round(time.Millisecond), took.Round(time.Millisecond), idle, rss)
	if idle <= 0 || rss > idle+64 {
		t.Errorf("router peak RSS %.1f MiB, idle %.1f MiB: want under %.1f MiB", rss, idle, idle+64)
	}

	rows, err := e.db.Query(context.Background(), `SELECT table_name, reason, coalesce(row_values::text, ''),
		coalesce(value_notes::text, '') FROM cdc_router.quarantine`)
	if err != nil {
		t.Fatal(err)
	}
	var records []string
	for rows.Next() {
		var table, reason, values, notes string
		if err := rows.Scan(&table, &reason, &values, &notes); err != nil {
			t.Fatal(err)
		}
		records = append(records, table+": "+reason)
		if len(values)+len(notes) > 1024 || strings.Contains(values, "xxxx") {
			t.Errorf("the record of %s stores %d bytes of values and %d of notes, want no content", table, len(values), len(notes))
		}
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	if len(records) != 1 || !strings.HasPrefix(records[0], "message:"+prefix+": ") ||
		!strings.Contains(records[0], fmt.Sprintf("%d bytes", size)) {
		t.Errorf("quarantine records:\n%s\nwant one, of the message with the prefix, with its size (%d bytes)",
			strings.Join(records, "\n"), size)
	} else {
		t.Logf("quarantined: %s", records[0])
	}
	expectCleanLog(t, r, "xxxxxxxxxxxxxxxx")
}
