package e2e

import (
	"context"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
)

// cutoverGuide is what the guide's section "Cutover from a running Debezium connector" hands the operator:
// the migrate and run commands (their arguments), the mapping file, the check of step 4 and the SQL of
// step 6, with the example LSN and Debezium's default slot name as the placeholders they are.
type cutoverGuide struct {
	migrate, run []string
	config       string
	check, drop  string
}

const (
	guideLSN  = "0/1A2B3C8" // the LSN the guide's example log line shows
	guideSlot = "'debezium'"
)

func readCutoverGuide(t *testing.T) cutoverGuide {
	t.Helper()
	b, err := os.ReadFile("../docs/howto/adopt-debezium.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	at := strings.Index(s, "\n## Cutover from a running Debezium connector\n")
	if at < 0 {
		t.Fatal("the guide has no section on a Debezium cutover")
	}
	s = s[at+1:]
	s = s[:strings.Index(s[1:], "\n## ")+1]
	var g cutoverGuide
	for _, m := range regexp.MustCompile("(?ms)^```(sql|sh|properties)\n(.*?)^```").FindAllStringSubmatch(s, -1) {
		body := m[2]
		switch m[1] {
		case "sh":
			line := strings.Fields(strings.ReplaceAll(body, "\\\n", " "))
			switch {
			case len(line) > 1 && line[0] == "cdc-router" && line[1] == "migrate":
				g.migrate = line[2:]
			case len(line) > 1 && line[0] == "cdc-router" && line[1] == "run":
				g.run = line[2:]
			}
		case "properties":
			if strings.HasPrefix(body, "# recipe: debezium-cutover\n") {
				g.config = body
			}
		case "sql":
			switch {
			case strings.Contains(body, "confirmed_flush_lsn >= '"+guideLSN+"'"):
				g.check = body
			case strings.Contains(body, "pg_drop_replication_slot("+guideSlot+")"):
				g.drop = body
			}
		}
	}
	if g.migrate == nil || g.run == nil || g.config == "" || g.check == "" || g.drop == "" {
		t.Fatalf("the guide's Debezium cutover lacks a step the test runs: %+v", g)
	}
	return g
}

// committed is one writer transaction: its row's id and when its COMMIT was sent and returned.
type committed struct {
	id         string
	sent, done time.Time
}

// fakeDebezium plays a Debezium connector: its own pgoutput slot and publication (as
// publication.autocreate.mode=filtered makes it), read with pg_logical_slot_get_binary_changes every
// interval; each insert read is "published" into ids, and reading confirms the slot's position, as
// Debezium does once it has delivered the events and committed their offsets.
type fakeDebezium struct {
	mu   sync.Mutex
	ids  map[string]bool
	stop chan struct{}
	done chan struct{}
}

func startFakeDebezium(t *testing.T, e *env, slot string, interval time.Duration) *fakeDebezium {
	t.Helper()
	e.exec(`CREATE PUBLICATION dbz_publication FOR TABLE public.outboxevent`)
	e.exec(`SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, slot)
	conn, err := pgx.Connect(context.Background(), e.pgURL)
	if err != nil {
		t.Fatal(err)
	}
	d := &fakeDebezium{ids: map[string]bool{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(d.done)
		defer conn.Close(context.Background())
		idColumn := map[uint32]int{}
		for {
			select {
			case <-d.stop:
				return
			case <-time.After(interval):
			}
			rows, err := conn.Query(context.Background(), `SELECT data FROM pg_logical_slot_get_binary_changes($1, NULL, NULL,
				'proto_version', '1', 'publication_names', 'dbz_publication')`, slot)
			if err != nil {
				t.Errorf("Debezium's slot: %v", err)
				return
			}
			var batch []string
			for rows.Next() {
				var data []byte
				if err := rows.Scan(&data); err != nil {
					t.Errorf("Debezium's slot: %v", err)
					return
				}
				m, err := pglogrepl.Parse(data)
				if err != nil {
					t.Errorf("Debezium's slot: %v", err)
					return
				}
				switch m := m.(type) {
				case *pglogrepl.RelationMessage:
					for i, c := range m.Columns {
						if c.Name == "id" {
							idColumn[m.RelationID] = i
						}
					}
				case *pglogrepl.InsertMessage:
					batch = append(batch, string(m.Tuple.Columns[idColumn[m.RelationID]].Data))
				}
			}
			if err := rows.Err(); err != nil {
				t.Errorf("Debezium's slot: %v", err)
				return
			}
			d.mu.Lock()
			for _, id := range batch {
				d.ids[id] = true
			}
			d.mu.Unlock()
		}
	}()
	t.Cleanup(d.halt)
	return d
}

// halt stops Debezium after the read under way, if any; what it read is published.
func (d *fakeDebezium) halt() {
	select {
	case <-d.stop:
	default:
		close(d.stop)
	}
	<-d.done
}

func (d *fakeDebezium) published() map[string]bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[string]bool, len(d.ids))
	for id := range d.ids {
		out[id] = true
	}
	return out
}

// outboxWriters insert Debezium-shaped rows (and delete each in its own transaction when deleteAfter) from
// two connections until the function returned is called, which returns every transaction that committed.
// The test's end stops them too.
func outboxWriters(t *testing.T, e *env, deleteAfter bool) func() []committed {
	t.Helper()
	stop := make(chan struct{})
	var once sync.Once
	var mu sync.Mutex
	var all []committed
	var wg sync.WaitGroup
	for w := 0; w < 2; w++ {
		conn, err := pgx.Connect(context.Background(), e.pgURL)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer conn.Close(context.Background())
			ctx := context.Background()
			for {
				select {
				case <-stop:
					return
				default:
				}
				tx, err := conn.Begin(ctx)
				if err != nil {
					t.Errorf("writer: %v", err)
					return
				}
				var id string
				if err := tx.QueryRow(ctx, `INSERT INTO outboxevent (id, aggregatetype, aggregateid, type, payload)
					VALUES (gen_random_uuid(), 'Order', 'o-' || (random() * 20)::int, 'OrderCreated', '{"total": 1}')
					RETURNING id`).Scan(&id); err != nil {
					t.Errorf("writer: %v", err)
					return
				}
				if deleteAfter {
					if _, err := tx.Exec(ctx, `DELETE FROM outboxevent WHERE id = $1`, id); err != nil {
						t.Errorf("writer: %v", err)
						return
					}
				}
				sent := time.Now()
				if err := tx.Commit(ctx); err != nil {
					t.Errorf("writer: %v", err)
					return
				}
				mu.Lock()
				all = append(all, committed{id, sent, time.Now()})
				mu.Unlock()
				time.Sleep(2 * time.Millisecond)
			}
		}()
	}
	halt := func() []committed {
		once.Do(func() { close(stop) })
		wg.Wait()
		return all
	}
	t.Cleanup(func() { halt() })
	return halt
}

// TestDebeziumCutover runs the guide's cutover from a running Debezium connector while writers keep
// writing: a slot of its own, read through pgoutput, plays Debezium (and lags: it reads every 200 ms); the
// router starts with the guide's command and mapping; Debezium is stopped once the guide's check says it
// passed the router's LSN (for the initial snapshot, at once, without the check), and its slot dropped with
// the guide's SQL. Every committed row is published by Debezium or the router (no gap), and a row both
// published was committed between the router's start and Debezium's stop (bounded duplicates), for a table
// that keeps its rows and for one whose rows are deleted in the transaction that inserted them.
func TestDebeziumCutover(t *testing.T) {
	guide := readCutoverGuide(t)
	_, ddl, _ := recipe(t, "debezium-jsonb") // Debezium's own table shape
	for _, tc := range []struct {
		name        string
		deleteAfter bool
		snapshot    bool // the router's initial snapshot instead of --snapshot never, and no check
	}{
		{name: "delete after insert", deleteAfter: true},
		{name: "rows kept"},
		{name: "rows kept, initial snapshot", snapshot: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runDebeziumCutover(t, guide, ddl, tc.deleteAfter, tc.snapshot)
		})
	}
}

func runDebeziumCutover(t *testing.T, guide cutoverGuide, ddl string, deleteAfter, snapshot bool) {
	e := newStreamEnv(t)
	e.exec(ddl)
	if out, code := e.cli(append([]string{"migrate"}, guide.migrate...)...); code != 0 {
		t.Fatalf("the guide's migrate: exit %d: %s", code, out)
	}
	dbzSlot := e.slot + "_dbz"
	debezium := startFakeDebezium(t, e, dbzSlot, 200*time.Millisecond)
	c := e.consume(e.queue)
	writers := outboxWriters(t, e, deleteAfter)
	time.Sleep(700 * time.Millisecond) // Debezium alone

	config := writeConfig(t, guide.config)
	args := []string{}
	for i := 0; i < len(guide.run); i++ {
		switch a := guide.run[i]; {
		case a == "--config":
			args = append(args, a, config)
			i++
		case a == "--snapshot" && snapshot:
			i++ // the default, initial
		default:
			args = append(args, a)
		}
	}
	routerStart := time.Now()
	var debeziumStop time.Time
	if snapshot {
		debezium.halt() // Debezium lagging at the router's start, stopped before it caught up: the snapshot has the rows
		debeziumStop = time.Now()
	}
	r := e.start("", args...)
	created := "created replication slot without a snapshot (--snapshot=never)"
	if snapshot {
		created = "created replication slot with a snapshot"
	}
	r.waitLog(created, 30*time.Second)
	lsn := regexp.MustCompile(regexp.QuoteMeta(created) + `"?[^\n]* lsn=(\S+)`).FindStringSubmatch(r.Output())
	if lsn == nil {
		t.Fatalf("no LSN in the router's line %q:\n%s", created, tail(r.Output(), 20))
	}
	r.waitLog("msg=streaming ", 30*time.Second)
	if !snapshot {
		check := strings.ReplaceAll(strings.ReplaceAll(guide.check, guideLSN, lsn[1]), guideSlot, "'"+dbzSlot+"'")
		deadline := time.Now().Add(20 * time.Second)
		for {
			var passed bool
			if err := e.db.QueryRow(context.Background(), check).Scan(&passed); err != nil {
				t.Fatalf("the guide's check: %v", err)
			}
			if passed {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("Debezium's slot never passed the router's LSN %s", lsn[1])
			}
			time.Sleep(20 * time.Millisecond)
		}
		debezium.halt()
		debeziumStop = time.Now()
	}
	e.exec(strings.ReplaceAll(guide.drop, guideSlot, "'"+dbzSlot+"'"))
	time.Sleep(500 * time.Millisecond) // the router alone
	rows := writers()

	fromDebezium := debezium.published()
	deadline := time.Now().Add(30 * time.Second)
	var missing []string
	for {
		fromRouter := map[string]bool{}
		for _, d := range c.snapshot() {
			fromRouter[d.id] = true
		}
		missing = missing[:0]
		for _, row := range rows {
			if !fromDebezium[row.id] && !fromRouter[row.id] {
				missing = append(missing, row.id)
			}
		}
		if len(missing) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(missing) > 0 {
		t.Fatalf("gap: %d of %d committed rows published by neither Debezium nor the router (first %s)",
			len(missing), len(rows), missing[0])
	}
	time.Sleep(300 * time.Millisecond) // a late duplicate from the router would arrive meanwhile
	fromRouter := map[string]int{}
	for _, d := range c.snapshot() {
		fromRouter[d.id]++
		if d.routingKey != "outbox.event.Order" {
			t.Fatalf("message %s: routing key %q, want the guide's outbox.event.Order", d.id, d.routingKey)
		}
	}
	both, window, beforeRouter, snapshotOnly := 0, 0, 0, 0
	for _, row := range rows {
		inWindow := row.done.After(routerStart) && row.sent.Before(debeziumStop)
		if inWindow {
			window++
		}
		if row.done.Before(routerStart) {
			beforeRouter++
			if !fromDebezium[row.id] {
				snapshotOnly++
			}
		}
		if !fromDebezium[row.id] || fromRouter[row.id] == 0 {
			continue
		}
		both++
		if !inWindow && !(snapshot && !deleteAfter && row.sent.Before(debeziumStop)) {
			t.Errorf("row %s published by both, but committed outside the router's start (%v) to Debezium's stop (%v): sent %v, done %v",
				row.id, routerStart.Format(time.StampMicro), debeziumStop.Format(time.StampMicro),
				row.sent.Format(time.StampMicro), row.done.Format(time.StampMicro))
		}
	}
	t.Logf("%d rows committed (%d before the router started, %d of them not published by Debezium; %d between the router's "+
		"start and Debezium's stop); Debezium published %d, the router %d; %d by both; overlap %v", len(rows), beforeRouter,
		snapshotOnly, window, len(fromDebezium), len(fromRouter), both, debeziumStop.Sub(routerStart).Round(time.Millisecond))
}
