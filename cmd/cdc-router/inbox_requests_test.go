package main

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/cdc-router/cdc-router/inbox"
	"github.com/cdc-router/cdc-router/inbox/runner"
	"github.com/cdc-router/cdc-router/internal/testenv"
)

// Issue 35, finding 3, through the command as an operator meets it. Order 42: v1 applied, v3 parked;
// `inbox resolve --parked` with no runner running times out, and the request expires (the command says
// so); the replayed v2 arrives and the runner starts: v2 and v3 are applied in order, the expired request
// never runs. `inbox requests` lists the requests with their states; `inbox cancel` withdraws a waiting
// one and refuses one carried out, naming its outcome. Order 9: a resolve left filed on purpose runs after
// its missing v2 arrived and is refused. Order 7: a real skip, then the skipped v2 arrives and is failed
// (reason skipped), listed by `inbox list`.
func TestInboxRequestsCommand(t *testing.T) {
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
	handler := func(ctx context.Context, tx pgx.Tx, ev inbox.Event) error {
		var body struct{ Delta int64 }
		if err := json.Unmarshal(ev.Payload, &body); err != nil {
			return inbox.Permanent(err)
		}
		_, err := tx.Exec(ctx, `INSERT INTO totals AS t VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET amount = t.amount + EXCLUDED.amount`,
			ev.AggregateID, body.Delta)
		return err
	}
	consumer := "req-" + testenv.Name(t)[2:20]
	p, err := inbox.New(db, handler, inbox.Config{Consumer: consumer,
		Prepare: func(ctx context.Context, tx pgx.Tx) error { return inbox.Migrate(ctx, tx) }}, nil)
	if err != nil {
		t.Fatal(err)
	}
	a1, a2, a3 := inboxEvent("42", 1, 1), inboxEvent("42", 2, 20), inboxEvent("42", 3, 300)
	b1, b2, b3 := inboxEvent("7", 1, 1), inboxEvent("7", 2, 20), inboxEvent("7", 3, 300)
	c1, c2, c4 := inboxEvent("9", 1, 1), inboxEvent("9", 2, 20), inboxEvent("9", 4, 4000)
	for _, ev := range []inbox.Event{a1, a3, b1, b3, c1, c4} {
		if _, err := p.Process(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	env := map[string]string{"CDC_ROUTER_PG_URL": url, "CDC_ROUTER_CONSUMER": consumer, "USER": "alice"}
	inboxCLI := func(args ...string) (string, string, int) {
		t.Helper()
		return runCLI(t, env, append([]string{"inbox"}, args...)...)
	}
	requestID := regexp.MustCompile(`request (\d+)`)

	_, stderr, code := inboxCLI("resolve", "--parked", a3.ID, "--note", "v2 quarantined", "--wait", "1s")
	if code != 1 || !strings.Contains(stderr, "is an inbox runner (runner.Runner) of this consumer running? "+
		"The request has expired and will not be carried out later") {
		t.Fatalf("resolve without a runner: exit %d, stderr %q", code, stderr)
	}
	expired := requestID.FindStringSubmatch(stderr)[1]
	stdout, stderr, code := inboxCLI("resolve", "--parked", a3.ID, "--leave-filed", "--wait", "0")
	if code != 0 || !strings.Contains(stdout, "left filed (--leave-filed), not carried out yet") {
		t.Fatalf("resolve --leave-filed: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	left := requestID.FindStringSubmatch(stdout)[1]
	stdout, stderr, code = inboxCLI("cancel", left)
	if code != 0 || stdout != "request "+left+": cancelled, no runner will carry it out\n" {
		t.Errorf("cancel %s: exit %d, stdout %q, stderr %q", left, code, stdout, stderr)
	}
	stdout, stderr, code = inboxCLI("resolve", "--parked", c4.ID, "--leave-filed", "--wait", "0")
	if code != 0 {
		t.Fatalf("resolve --leave-filed of 9's v4: exit %d, stderr %q", code, stderr)
	}
	refused := requestID.FindStringSubmatch(stdout)[1]
	if _, err := p.Process(ctx, c2); err != nil { // 9's v2 arrives (another instance) before a runner runs
		t.Fatal(err)
	}
	if _, stderr, code = inboxCLI("resolve", "--parked", a3.ID, "--wait", "0"); code != 2 || !strings.Contains(stderr, "add --leave-filed") {
		t.Errorf("resolve --wait 0: exit %d, stderr %q", code, stderr)
	}

	// The replayed v2 of order 42 waits in the queue; the runner starts.
	exchange := testenv.Name(t)
	publish(t, exchange, a2)
	r, err := runner.New(p, runner.Config{URLs: []string{testenv.AMQPURL(t)}, Exchange: exchange,
		Queue: exchange, Bindings: []string{"#"}, RequestPoll: 50 * time.Millisecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	waitTotal(t, db, "42", 1+20+300)

	stdout, stderr, code = inboxCLI("resolve", "--parked", b3.ID, "--note", "v2 lost")
	if code != 0 || !strings.Contains(stdout, "parked "+b3.ID+": applied (request ") {
		t.Fatalf("resolve --parked with a runner: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	resolved := requestID.FindStringSubmatch(stdout)[1]
	publish(t, exchange, b2)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		stdout, _, _ = inboxCLI("list")
		if strings.Contains(stdout, b2.ID) || time.Now().After(deadline) {
			break
		}
	}
	if !strings.Contains(stdout, "skipped") || !strings.Contains(stdout, "inbox request "+resolved) {
		t.Errorf("inbox list after the skipped v2 arrived:\n%s", stdout)
	}
	waitTotal(t, db, "7", 1+300)

	stdout, _, code = inboxCLI("requests")
	rows := map[string]string{}
	for _, line := range strings.Split(stdout, "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			rows[f[0]] = line
		}
	}
	for id, s := range map[string][]string{
		expired:  {"alice@", "resolve parked", a3.ID, "expired", "not carried out"},
		left:     {"cancelled", "by alice@"},
		refused:  {"done", "refused: the missing version 2 arrived (order 9 is at version 2, was 1 when the request was filed); nothing skipped"},
		resolved: {"done", "applied"},
	} {
		for _, want := range s {
			if !strings.Contains(rows[id], want) {
				t.Errorf("inbox requests: row %s lacks %q:\n%s", id, want, stdout)
			}
		}
	}
	_, stderr, code = inboxCLI("cancel", resolved)
	if code != 1 || !strings.Contains(stderr, "carried out already, outcome applied") {
		t.Errorf("cancel of a done request: exit %d, stderr %q", code, stderr)
	}
	if _, stderr, code = inboxCLI("cancel", "x1"); code != 2 || !strings.Contains(stderr, "is not a request ID") {
		t.Errorf("cancel x1: exit %d, stderr %q", code, stderr)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	t.Logf("requests:\n%s", stdout)
}

// publish sends ev to exchange (a topic exchange the test declares) as cdc-router does, and waits for
// the broker's confirm.
func publish(t *testing.T, exchange string, ev inbox.Event) {
	t.Helper()
	url := testenv.AMQPURL(t)
	c, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ch, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.ExchangeDeclare(exchange, "topic", false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	// The runner's queue, declared as it declares it, so that the event waits in it.
	if _, err := ch.QueueDeclare(exchange, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteQueueOf(url, exchange) })
	if err := ch.QueueBind(exchange, "#", exchange, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	dc, err := ch.PublishWithDeferredConfirm(exchange, "order."+ev.Type, true, false, amqp.Publishing{
		MessageId: ev.ID, Type: ev.Type, ContentType: "application/json", Body: ev.Payload, DeliveryMode: amqp.Persistent,
		Headers: amqp.Table{"aggregate_type": ev.AggregateType, "aggregate_id": ev.AggregateID,
			"aggregate_version": ev.AggregateVersion, "schema_version": ev.SchemaVersion}})
	if err != nil {
		t.Fatal(err)
	}
	if !dc.Wait() {
		t.Fatal("publish nacked")
	}
}

// deleteQueueOf deletes the test's queue and exchange name.
func deleteQueueOf(url, name string) {
	c, err := amqp.Dial(url)
	if err != nil {
		return
	}
	defer c.Close()
	if ch, err := c.Channel(); err == nil {
		ch.QueueDelete(name, false, false, false)
		ch.ExchangeDelete(name, false, false)
	}
}

// waitTotal waits up to 30 s for order id's total to be amount.
func waitTotal(t *testing.T, db *pgxpool.Pool, id string, amount int64) {
	t.Helper()
	var got int64
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if err := db.QueryRow(context.Background(), `SELECT coalesce((SELECT amount FROM totals WHERE id = $1), 0)`, id).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got == amount {
			return
		}
	}
	t.Fatalf("total of %s = %d, want %d", id, got, amount)
}
