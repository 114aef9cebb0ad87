package e2e

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/internal/testenv"
)

// The memory tests measure the router's peak RSS, which the race detector multiplies several times over,
// so they run a router built without -race whatever the test binary was built with.
func plainBinary(t testing.TB) string {
	t.Helper()
	return testenv.Build{Pkg: testenv.RouterPackage}.MustPath(t)
}

// startPlain is start with the router built without -race; it waits until the router streams. amqpURL
// overrides the broker address.
func (e *env) startPlain(amqpURL string, flags ...string) *router {
	e.t.Helper()
	r := e.startBinary(plainBinary(e.t), amqpURL, flags...)
	r.waitLog("msg=streaming ", 30*time.Second)
	return r
}

// messageIDs counts the deliveries of each message id on a queue and keeps nothing else, so that large
// messages do not pile up in the test process.
type messageIDs struct {
	mu sync.Mutex
	n  map[string]int
}

func (e *env) consumeIDs(queue string) *messageIDs {
	e.t.Helper()
	msgs, err := e.channel().Consume(queue, "", true, false, false, false, nil)
	if err != nil {
		e.t.Fatalf("consume %s: %v", queue, err)
	}
	m := &messageIDs{n: map[string]int{}}
	go func() {
		for d := range msgs {
			m.mu.Lock()
			m.n[d.MessageId]++
			m.mu.Unlock()
		}
	}()
	return m
}

// waitAll waits until every one of ids was delivered.
func (m *messageIDs) waitAll(t testing.TB, ids []string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		m.mu.Lock()
		missing := 0
		for _, id := range ids {
			if m.n[id] == 0 {
				missing++
			}
		}
		m.mu.Unlock()
		if missing == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d events never arrived within %v", missing, len(ids), timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestHugeRowIsQuarantinedInBoundedMemory: a row whose payload is far over --max-payload-bytes (default
// 8 MiB) is quarantined with a bounded prefix, its whole size and digest, and the stream goes on. Before the
// fix the tuple was copied, converted and encoded whole several times (1.45 GB of RSS for 200 MB), and the
// 300 MB json row could not be quarantined at all ("string too long to represent as jsonb string"), so the
// stream restarted forever and the good rows after it never arrived.
func TestHugeRowIsQuarantinedInBoundedMemory(t *testing.T) {
	for _, tc := range []struct {
		name, column string
		size         int
	}{
		{"200MiB jsonb", "jsonb", 200 << 20},
		{"300MiB json", "json", 300 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) { hugeRow(t, tc.column, tc.size) })
	}
}

// hugeRow streams one row whose payload column (of type column) is size bytes as PostgreSQL sends it.
func hugeRow(t *testing.T, column string, size int) {
	e := newStreamEnv(t)
	if column != "jsonb" {
		e.exec(`ALTER TABLE outbox ALTER COLUMN payload TYPE ` + column)
	}
	c := e.consume(e.queue)
	r := e.startPlain("")
	began := time.Now()
	id := uuid()
	// '{"big": "' + n × 'x' + '"}' is n+11 bytes, in jsonb's text form as well.
	e.exec(fmt.Sprintf(`INSERT INTO outbox (id, aggregate_type, aggregate_id, aggregate_version, event_type, payload)
		VALUES ($1, 'order', 'huge', 1, 'created', ('{"big": "' || repeat('x', %d) || '"}')::%s)`, size-11, column), id)
	inserted := time.Since(began)
	w := newWriter(t, e.pgURL, 3)
	w.write(20, 5, 0)
	c.waitFor(t, w.rows, 3*time.Minute)
	e.waitAckedTo(e.currentLSN(), 30*time.Second)
	took := time.Since(began)
	rss := testenv.PeakRSS(r.Cmd.Process.Pid)
	bound := float64(size>>20) + 64
	t.Logf("%d MiB %s row: inserted in %v, quarantined and 20 rows after it delivered in %v; router peak RSS %.1f MiB "+
		"(bound %.0f MiB)", size>>20, column, inserted.Round(time.Millisecond), took.Round(time.Millisecond), rss, bound)
	if rss <= 0 || rss > bound {
		t.Errorf("router peak RSS %.1f MiB for one %d MiB row, want under %.0f MiB", rss, size>>20, bound)
	}
	e.expectQuarantined(id)
	var stored, noted int64
	var sameDigest bool
	err := e.db.QueryRow(context.Background(), `
		SELECT octet_length(q.row_values::text), (q.value_notes->'payload'->>'bytes')::bigint,
		       q.value_notes->'payload'->>'sha256' = encode(sha256(convert_to(o.payload::text, 'UTF8')), 'hex')
		FROM cdc_router.quarantine q JOIN outbox o ON o.id::text = q.event_id`).Scan(&stored, &noted, &sameDigest)
	if err != nil {
		t.Fatalf("read the quarantine record: %v", err)
	}
	t.Logf("record: row_values %d bytes, value_notes payload bytes %d, digest equal %v", stored, noted, sameDigest)
	if stored > 1<<20 {
		t.Errorf("the quarantine record's row_values is %d bytes: the stored value is not bounded", stored)
	}
	if noted != int64(size) || !sameDigest {
		t.Errorf("value_notes records %d bytes (digest equal: %v), want the payload's whole size %d and its SHA-256",
			noted, sameDigest, size)
	}
	expectCleanLog(t, r, "xxxxxxxxxxxxxxxx")
}

// TestRowsOf1MBInBoundedMemory: 400 rows with 1 MB payloads (400 MB, three times the bound) (under --max-payload-bytes 2000000)
// are written while the router is stopped, so that at its start the whole backlog is there to read, and the
// connection to the broker stalls for 5 s once the router is publishing (a broker that stops reading for a
// while). They all arrive, and the router's peak RSS stays under 128 MiB. Before the fix the publish window
// was bounded only by count (4 lanes × 512 messages), so while its writes were blocked the router kept
// reading and queued hundreds of payloads.
func TestRowsOf1MBInBoundedMemory(t *testing.T) {
	e := newStreamEnv(t)
	seen := e.consumeIDs(e.queue)
	first := e.startPlain("", "--max-payload-bytes", "2000000") // creates the slot
	first.signal(syscall.SIGTERM)
	if code := first.wait(30 * time.Second); code != 0 {
		t.Fatalf("exit %d after SIGTERM", code)
	}
	began := time.Now()
	ctx := context.Background()
	for i := 0; i < 40; i++ {
		// '{"p": "' + 999,991 letters + '"}' is 1,000,000 bytes.
		_, err := e.db.Exec(ctx, `INSERT INTO outbox (id, aggregate_type, aggregate_id, aggregate_version, event_type, payload)
			SELECT gen_random_uuid(), 'order', 'big-' || g, $1, 'created', jsonb_build_object('p', repeat(chr(97 + g), 999991))
			FROM generate_series(0, 9) g`, i+1)
		if err != nil {
			t.Fatal(err)
		}
	}
	written := time.Since(began)
	rows, err := e.db.Query(ctx, `SELECT id::text FROM outbox`)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(ids) != 400 {
		t.Fatalf("%d rows in the outbox: %v", len(ids), err)
	}
	began = time.Now()
	r := e.startPlain(stallBroker(t, e.amqpURL, 8<<20, 5*time.Second), "--max-payload-bytes", "2000000")
	seen.waitAll(t, ids, 3*time.Minute)
	took := time.Since(began)
	rss := testenv.PeakRSS(r.Cmd.Process.Pid)
	t.Logf("400 rows of 1 MB: written in %v, all delivered %v after the router's start; router peak RSS %.1f MiB (bound 128 MiB)",
		written.Round(time.Millisecond), took.Round(time.Millisecond), rss)
	if n := e.quarantineRecords(); len(n) != 0 {
		t.Errorf("%d rows quarantined, want none", len(n))
	}
	if rss <= 0 || rss > 128 {
		t.Errorf("router peak RSS %.1f MiB, want under 128 MiB", rss)
	}
}

// stallBroker starts a TCP proxy to the broker of amqpURL and returns the URL through it. Once the clients
// have sent more than after bytes through it, it forwards nothing in either direction for hold, once: a
// broker that stops reading for a while (a slow disk, a long GC), so the router's writes block.
func stallBroker(t testing.TB, amqpURL string, after int64, hold time.Duration) string {
	t.Helper()
	u, err := url.Parse(amqpURL)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var sent, until atomic.Int64 // bytes sent to the broker; end of the stall in Unix ns, once it began
	wait := func() {
		if end := until.Load(); end != 0 {
			time.Sleep(time.Until(time.Unix(0, end)))
		}
	}
	target := u.Host
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			t.Cleanup(func() { c.Close(); s.Close() })
			go relay(s, c, func(n int) {
				if sent.Add(int64(n)) > after {
					until.CompareAndSwap(0, time.Now().Add(hold).UnixNano())
				}
				wait()
			})
			go relay(c, s, func(int) { wait() })
		}
	}()
	u.Host = ln.Addr().String()
	return u.String()
}

// relay copies src to dst, calling each with the size of every chunk read, before it is written.
func relay(dst, src net.Conn, each func(n int)) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			each(n)
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
