// Package inboxlab is the test world the tests of inbox and inbox/runner share: a database of its own
// with the inbox tables and an order projection, and a topic exchange and queue of its own on the test
// RabbitMQ, bound the way a consumer binds to cdc-router. It is imported by tests only.
package inboxlab

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/cdc-router/cdc-router/inbox"
	"github.com/cdc-router/cdc-router/inbox/runner"
	"github.com/cdc-router/cdc-router/internal/testenv"
)

// Lab is one test's world: its own database with the inbox tables and an order projection, and its own
// topic exchange and queue on the shared RabbitMQ, bound the way a consumer binds to cdc-router.
type Lab struct {
	T        *testing.T
	Ctx      context.Context
	DB       *pgx.Conn // tests that process concurrently connect again (connect)
	URL      string
	Conn     *amqp.Connection
	Pub      *amqp.Channel // confirm mode
	Exchange string
	Queue    string

	// Fault, when set, runs in the handler after the projection write; an error rolls both back.
	Fault   func(ctx context.Context, tx pgx.Tx, ev inbox.Event) error
	Handled atomic.Int64 // handler calls that returned nil
}

// ProjectionSQL creates the lab's order projection: its amounts and the log of applied events.
const ProjectionSQL = `
CREATE TABLE projection (id text PRIMARY KEY, amount bigint NOT NULL, version bigint NOT NULL);
CREATE TABLE applied_log (n bigint GENERATED ALWAYS AS IDENTITY, event_id text NOT NULL);`

// New is a lab with the inbox tables, in a new database of pg.
func New(t *testing.T, pg *testenv.Postgres) *Lab {
	t.Helper()
	l := NewBare(t, pg)
	if err := inbox.Migrate(l.Ctx, l.DB); err != nil {
		t.Fatal(err)
	}
	return l
}

// NewBare is a lab without the inbox tables.
func NewBare(t *testing.T, pg *testenv.Postgres) *Lab {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	l := &Lab{T: t, Ctx: ctx}
	var err error
	l.URL = pg.NewDatabase(t)
	l.DB = l.Connect()
	if _, err := l.DB.Exec(l.Ctx, ProjectionSQL); err != nil {
		t.Fatalf("create projection: %v", err)
	}
	if l.Conn, err = amqp.Dial(testenv.AMQPURL(t)); err != nil {
		t.Fatalf("dial RabbitMQ: %v", err)
	}
	t.Cleanup(func() { l.Conn.Close() })
	l.Pub = l.Channel()
	if err := l.Pub.Confirm(false); err != nil {
		t.Fatalf("confirm mode: %v", err)
	}
	l.Exchange, l.Queue = testenv.Name(t), testenv.Name(t)
	l.Declare()
	return l
}

// Connect opens a database connection of its own, closed when the test ends.
func (l *Lab) Connect() *pgx.Conn {
	l.T.Helper()
	c, err := pgx.Connect(l.Ctx, l.URL)
	if err != nil {
		l.T.Fatalf("connect: %v", err)
	}
	l.T.Cleanup(func() { c.Close(context.Background()) })
	return c
}

func (l *Lab) Declare() {
	t := l.T
	if err := l.Pub.ExchangeDeclare(l.Exchange, "topic", false, false, false, false, nil); err != nil {
		t.Fatalf("declare exchange: %v", err)
	}
	if _, err := l.Pub.QueueDeclare(l.Queue, true, false, false, false, nil); err != nil {
		t.Fatalf("declare queue: %v", err)
	}
	if err := l.Pub.QueueBind(l.Queue, "order.#", l.Exchange, false, nil); err != nil {
		t.Fatalf("bind queue: %v", err)
	}
	t.Cleanup(func() {
		// A channel of its own: the test may have broken the others.
		c, err := amqp.Dial(testenv.AMQPURL(t))
		if err != nil {
			return
		}
		defer c.Close()
		if ch, err := c.Channel(); err == nil {
			ch.QueueDelete(l.Queue, false, false, false)
			ch.ExchangeDelete(l.Exchange, false, false)
		}
	})
}

func (l *Lab) Channel() *amqp.Channel {
	ch, err := l.Conn.Channel()
	if err != nil {
		l.T.Fatalf("open channel: %v", err)
	}
	return ch
}

// Processor returns a Processor over the lab's database with the projection handler.
func (l *Lab) Processor(cfg inbox.Config) *inbox.Processor {
	return l.ProcessorOn(l.DB, cfg)
}

// ProcessorOn returns a Processor over db with the projection handler, for consumer
// "orders-projection" unless cfg names another.
func (l *Lab) ProcessorOn(db inbox.Beginner, cfg inbox.Config) *inbox.Processor {
	log := slog.New(slog.NewTextHandler(l.T.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	if cfg.Consumer == "" {
		cfg.Consumer = "orders-projection"
	}
	p, err := inbox.New(db, l.Handle, cfg, log)
	if err != nil {
		l.T.Fatal(err)
	}
	return p
}

// Handle adds the event's delta to the order's amount, and insists on the version order the inbox
// promises: the projection must be at exactly the previous version. A full state replaces the amount
// and may skip versions, never go back.
func (l *Lab) Handle(ctx context.Context, tx pgx.Tx, ev inbox.Event) error {
	var body struct{ Delta, Amount int64 }
	if err := json.Unmarshal(ev.Payload, &body); err != nil {
		return inbox.Permanent(fmt.Errorf("read payload: %w", err))
	}
	sql := `INSERT INTO projection AS p (id, amount, version) VALUES ($1, $2, $3)
		ON CONFLICT (id) DO UPDATE SET amount = p.amount + EXCLUDED.amount, version = EXCLUDED.version
		WHERE p.version = EXCLUDED.version - 1`
	amount := body.Delta
	if ev.FullState {
		sql = `INSERT INTO projection AS p (id, amount, version) VALUES ($1, $2, $3)
			ON CONFLICT (id) DO UPDATE SET amount = EXCLUDED.amount, version = EXCLUDED.version
			WHERE p.version < EXCLUDED.version`
		amount = body.Amount
	}
	tag, err := tx.Exec(ctx, sql, ev.AggregateID, amount, ev.AggregateVersion)
	if err != nil {
		return err
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("projection %s is not below version %d as expected", ev.AggregateID, ev.AggregateVersion)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO applied_log (event_id) VALUES ($1)`, ev.ID); err != nil {
		return err
	}
	if l.Fault != nil {
		if err := l.Fault(ctx, tx, ev); err != nil {
			return err
		}
	}
	l.Handled.Add(1)
	return nil
}

// Order is an incremental event of order aggregateID at version, adding delta to its amount.
func Order(aggregateID string, version, delta int64) inbox.Event {
	return inbox.Event{
		ID: NewID(), AggregateType: "order", AggregateID: aggregateID, AggregateVersion: version,
		Type: "OrderAmountAdded", SchemaVersion: 1, CommitLSN: uint64(0x16B3748 + version),
		Payload: fmt.Appendf(nil, `{"delta": %d}`, delta), Headers: map[string]string{"trace_id": "t-1"},
	}
}

// FullState is a full-state event of order aggregateID at version, whose amount is amount.
func FullState(aggregateID string, version, amount int64) inbox.Event {
	ev := Order(aggregateID, version, 0)
	ev.Type, ev.FullState, ev.Payload = "OrderState", true, fmt.Appendf(nil, `{"amount": %d}`, amount)
	return ev
}

// NewID is a random UUID (version 4), the shape of cdc-router's event ids.
func NewID() string {
	var b [16]byte
	rand.Read(b[:])
	b[6], b[8] = b[6]&0x0f|0x40, b[8]&0x3f|0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// Publish sends ev in cdc-router's message format and waits for the broker's confirm.
func (l *Lab) Publish(ev inbox.Event) {
	l.T.Helper()
	headers := amqp.Table{
		"aggregate_type": ev.AggregateType, "aggregate_id": ev.AggregateID,
		"aggregate_version": ev.AggregateVersion, "schema_version": ev.SchemaVersion,
		"commit_lsn": fmt.Sprintf("%X/%X", uint32(ev.CommitLSN>>32), uint32(ev.CommitLSN)),
	}
	for k, v := range ev.Headers {
		headers[k] = v
	}
	if ev.Backfill {
		headers["x-backfill"] = true
	}
	if ev.FullState {
		headers["full_state"] = true
	}
	ctx, cancel := context.WithTimeout(l.Ctx, 10*time.Second)
	defer cancel()
	dc, err := l.Pub.PublishWithDeferredConfirmWithContext(ctx, l.Exchange, ev.AggregateType+"."+ev.Type, true, false,
		amqp.Publishing{MessageId: ev.ID, Type: ev.Type, ContentType: "application/json", Body: ev.Payload,
			Headers: headers, DeliveryMode: amqp.Persistent})
	if err != nil {
		l.T.Fatalf("publish %s: %v", ev.ID, err)
	}
	if ok, err := dc.WaitContext(ctx); err != nil || !ok {
		l.T.Fatalf("publish %s: confirm ack=%v err=%v", ev.ID, ok, err)
	}
}

// Get fetches the next delivery with basic.get, waiting up to five seconds for one.
func (l *Lab) Get(ch *amqp.Channel) amqp.Delivery {
	l.T.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		d, ok, err := ch.Get(l.Queue, false)
		if err != nil {
			l.T.Fatalf("basic.get: %v", err)
		}
		if ok {
			return d
		}
	}
	l.T.Fatalf("no delivery on %s within 5s", l.Queue)
	return amqp.Delivery{}
}

// Process decodes a delivery and processes it, failing the test on an error.
func (l *Lab) Process(p *inbox.Processor, d amqp.Delivery) inbox.Result {
	l.T.Helper()
	ev, err := runner.DecodeDelivery(d)
	if err != nil {
		l.T.Fatalf("decode delivery: %v", err)
	}
	res, err := p.Process(l.Ctx, ev)
	if err != nil {
		l.T.Fatalf("process %s: %v", ev.ID, err)
	}
	return res
}

// Count runs a SELECT count(*)-style query returning one integer.
func (l *Lab) Count(sql string, args ...any) int64 {
	l.T.Helper()
	var n int64
	if err := l.DB.QueryRow(l.Ctx, sql, args...).Scan(&n); err != nil {
		l.T.Fatalf("%s: %v", sql, err)
	}
	return n
}

// Amount is the projected amount of an order (0 when it has no row).
func (l *Lab) Amount(id string) int64 {
	return l.Count(`SELECT coalesce((SELECT amount FROM projection WHERE id = $1), 0)`, id)
}

// Ready is the number of messages ready in the lab's queue.
func (l *Lab) Ready() int {
	l.T.Helper()
	ch := l.Channel()
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(l.Queue, false, false, false, false, nil)
	if err != nil {
		l.T.Fatalf("inspect queue: %v", err)
	}
	return q.Messages
}

// Want reports an error when got is not expected.
func Want[T comparable](t *testing.T, what string, got, expected T) {
	t.Helper()
	if got != expected {
		t.Errorf("%s = %v, want %v", what, got, expected)
	}
}
