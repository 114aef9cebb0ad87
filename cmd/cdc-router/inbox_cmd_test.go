package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cdc-router/cdc-router/inbox"
	"github.com/cdc-router/cdc-router/inbox/runner"
	"github.com/cdc-router/cdc-router/internal/testenv"
)

// inboxEvent is version v of order id, adding delta.
func inboxEvent(id string, v, delta int64) inbox.Event {
	return inbox.Event{ID: fmt.Sprintf("%s-v%d-%d", id, v, time.Now().UnixNano()), AggregateType: "order",
		AggregateID: id, AggregateVersion: v, Type: "added", SchemaVersion: 1,
		Payload: fmt.Appendf(nil, `{"delta": %d}`, delta)}
}

// `cdc-router inbox` over a consumer's records: list shows a failed and two parked events; retry and
// resolve without a running consumer wait and exit 1 saying no Runner took the request; with a Runner
// running, retry settles the fixed failed event (and the parked one behind it), resolve --parked skips a
// lost version, and list then shows nothing left. Usage errors exit 2 and --help exits 0.
func TestInboxCommand(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	url := pg.NewDatabase(t)
	db, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(ctx, `CREATE TABLE totals (id text PRIMARY KEY, amount bigint NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	var broken atomic.Bool
	broken.Store(true)
	handler := func(ctx context.Context, tx pgx.Tx, ev inbox.Event) error {
		var body struct{ Delta int64 }
		if err := json.Unmarshal(ev.Payload, &body); err != nil {
			return inbox.Permanent(err)
		}
		if body.Delta == 666 && broken.Load() {
			return inbox.Permanent(errors.New("rule 7 rejects this order"))
		}
		_, err := tx.Exec(ctx, `INSERT INTO totals AS t VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET amount = t.amount + EXCLUDED.amount`,
			ev.AggregateID, body.Delta)
		return err
	}
	consumer := "cli-" + testenv.Name(t)[2:20]
	p, err := inbox.New(db, handler, inbox.Config{Consumer: consumer,
		Prepare: func(ctx context.Context, tx pgx.Tx) error { return inbox.Migrate(ctx, tx) }}, nil)
	if err != nil {
		t.Fatal(err)
	}
	a1, a2, a3 := inboxEvent("42", 1, 1), inboxEvent("42", 2, 666), inboxEvent("42", 3, 10)
	b1, b3 := inboxEvent("7", 1, 100), inboxEvent("7", 3, 300) // 7's version 2 is lost
	for _, ev := range []inbox.Event{a1, a2, a3, b1, b3} {
		if _, err := p.Process(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	env := map[string]string{"CDC_ROUTER_PG_URL": url}
	inboxCLI := func(args ...string) (string, string, int) {
		t.Helper()
		return runCLI(t, env, append([]string{"inbox"}, args...)...)
	}

	stdout, stderr, code := inboxCLI("list", "--consumer", consumer)
	for _, s := range []string{"failed events, unresolved: 1", a2.ID, "order/42", "permanent", "rule 7 rejects",
		"parked events: 2", a3.ID, b3.ID, "order/7"} {
		if code != 0 || !strings.Contains(stdout, s) {
			t.Errorf("inbox list: exit %d, stderr %q, want %q in:\n%s", code, stderr, s, stdout)
		}
	}
	failedID := strings.Fields(strings.Split(stdout, "\n")[2])[0]

	_, stderr, code = inboxCLI("retry", "--parked", b3.ID, "--consumer", consumer, "--wait", "1s")
	if code != 1 || !strings.Contains(stderr, "is an inbox runner (runner.Runner) of this consumer running?") {
		t.Errorf("retry without a running consumer: exit %d, stderr %q", code, stderr)
	}

	r, err := runner.New(p, runner.Config{URLs: []string{testenv.AMQPURL(t)}, Exchange: testenv.Name(t),
		Queue: testenv.Name(t), Bindings: []string{"#"}, RequestPoll: 100 * time.Millisecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }() // waits for an exchange nobody declares; serves requests meanwhile
	broken.Store(false)
	stdout, stderr, code = inboxCLI("retry", failedID, "--consumer", consumer)
	if code != 0 || !strings.Contains(stdout, "failed "+failedID+": applied") {
		t.Errorf("inbox retry %s: exit %d, stdout %q, stderr %q", failedID, code, stdout, stderr)
	}
	stdout, stderr, code = inboxCLI("resolve", "--parked", b3.ID, "--note", "version 2 was dead-lettered", "--consumer", consumer)
	if code != 0 || !strings.Contains(stdout, "parked "+b3.ID+": applied") {
		t.Errorf("inbox resolve --parked: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	var a, b int64
	if err := db.QueryRow(ctx, `SELECT (SELECT amount FROM totals WHERE id = '42'), (SELECT amount FROM totals WHERE id = '7')`).Scan(&a, &b); err != nil {
		t.Fatal(err)
	}
	if a != 1+666+10 || b != 100+300 {
		t.Errorf("totals 42 = %d, 7 = %d; want 677 and 400", a, b)
	}
	stdout, _, code = inboxCLI("list", "--consumer", consumer)
	if code != 0 || !strings.Contains(stdout, "failed events, unresolved: 0") || !strings.Contains(stdout, "parked events: 0") {
		t.Errorf("inbox list after the repairs: exit %d\n%s", code, stdout)
	}
	_, stderr, code = inboxCLI("resolve", "999", "--consumer", consumer)
	if code != 1 || !strings.Contains(stderr, "no unresolved failed event") {
		t.Errorf("resolve of an unknown record: exit %d, stderr %q", code, stderr)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"retry", "abc", "--consumer", "c"}, "is not a failed record ID"},
		{[]string{"list"}, "set --consumer"},
		{[]string{"retry", "--consumer", "c"}, "name at least one failed record ID"},
		{[]string{"purge"}, "unknown subcommand"},
		{nil, "name a subcommand"},
	} {
		_, stderr, code := inboxCLI(c.args...)
		if code != 2 || !strings.Contains(stderr, c.want) {
			t.Errorf("inbox %v: exit %d, stderr %q; want exit 2 and %q", c.args, code, stderr, c.want)
		}
	}
	if stdout, _, code := inboxCLI("--help"); code != 0 || !strings.Contains(stdout, "Subcommands:") {
		t.Errorf("inbox --help: exit %d\n%s", code, stdout)
	}
	if stdout, _, code := inboxCLI("resolve", "--help"); code != 0 || !strings.Contains(stdout, "-note") ||
		!strings.Contains(stdout, "-parked") || !strings.Contains(stdout, "CDC_ROUTER_CONSUMER") {
		t.Errorf("inbox resolve --help: exit %d\n%s", code, stdout)
	}
}
