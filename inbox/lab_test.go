package inbox_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cdc-router/cdc-router/inbox"
	"github.com/cdc-router/cdc-router/internal/testenv"
	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"
)

// lab is one test's world: its own database with the inbox tables and an order projection, and its own
// topic exchange and queue on the shared RabbitMQ, bound the way a consumer binds to cdc-router.
type lab struct {
	t        *testing.T
	ctx      context.Context
	db       *pgx.Conn // tests that process concurrently connect again (connect)
	url      string
	conn     *amqp.Connection
	pub      *amqp.Channel // confirm mode
	exchange string
	queue    string

	// fault, when set, runs in the handler after the projection write; an error rolls both back.
	fault   func(ctx context.Context, tx pgx.Tx, ev inbox.Event) error
	handled atomic.Int64 // handler calls that returned nil
}

const projectionSQL = `
CREATE TABLE projection (id text PRIMARY KEY, amount bigint NOT NULL, version bigint NOT NULL);
CREATE TABLE applied_log (n bigint GENERATED ALWAYS AS IDENTITY, event_id text NOT NULL);`

func newLab(t *testing.T) *lab {
	t.Helper()
	l := newBareLab(t)
	if err := inbox.Migrate(l.ctx, l.db); err != nil {
		t.Fatal(err)
	}
	return l
}

// newBareLab is a lab without the inbox tables.
func newBareLab(t *testing.T) *lab {
	t.Helper()
	l := &lab{t: t, ctx: ctxFor(t)}
	var err error
	l.url = pg.NewDatabase(t)
	l.db = l.connect()
	if _, err := l.db.Exec(l.ctx, projectionSQL); err != nil {
		t.Fatalf("create projection: %v", err)
	}
	if l.conn, err = amqp.Dial(testenv.AMQPURL(t)); err != nil {
		t.Fatalf("dial RabbitMQ: %v", err)
	}
	t.Cleanup(func() { l.conn.Close() })
	l.pub = l.channel()
	if err := l.pub.Confirm(false); err != nil {
		t.Fatalf("confirm mode: %v", err)
	}
	l.exchange, l.queue = testenv.Name(t), testenv.Name(t)
	l.declare()
	return l
}

// connect opens a database connection of its own, closed when the test ends.
func (l *lab) connect() *pgx.Conn {
	l.t.Helper()
	c, err := pgx.Connect(l.ctx, l.url)
	if err != nil {
		l.t.Fatalf("connect: %v", err)
	}
	l.t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

func (l *lab) declare() {
	t := l.t
	if err := l.pub.ExchangeDeclare(l.exchange, "topic", false, false, false, false, nil); err != nil {
		t.Fatalf("declare exchange: %v", err)
	}
	if _, err := l.pub.QueueDeclare(l.queue, true, false, false, false, nil); err != nil {
		t.Fatalf("declare queue: %v", err)
	}
	if err := l.pub.QueueBind(l.queue, "order.#", l.exchange, false, nil); err != nil {
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
			ch.QueueDelete(l.queue, false, false, false)
			ch.ExchangeDelete(l.exchange, false, false)
		}
	})
}

func (l *lab) channel() *amqp.Channel {
	ch, err := l.conn.Channel()
	if err != nil {
		l.t.Fatalf("open channel: %v", err)
	}
	return ch
}

// processor returns a Processor over the lab's database with the projection handler.
func (l *lab) processor(cfg inbox.Config) *inbox.Processor {
	return l.processorOn(l.db, cfg)
}

// processorOn returns a Processor over db with the projection handler, for consumer
// "orders-projection" unless cfg names another.
func (l *lab) processorOn(db inbox.Beginner, cfg inbox.Config) *inbox.Processor {
	log := slog.New(slog.NewTextHandler(l.t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	if cfg.Consumer == "" {
		cfg.Consumer = "orders-projection"
	}
	p, err := inbox.New(db, l.handle, cfg, log)
	if err != nil {
		l.t.Fatal(err)
	}
	return p
}

// handle adds the event's delta to the order's amount, and insists on the version order the inbox
// promises: the projection must be at exactly the previous version. A full state replaces the amount
// and may skip versions, never go back.
func (l *lab) handle(ctx context.Context, tx pgx.Tx, ev inbox.Event) error {
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
	if l.fault != nil {
		if err := l.fault(ctx, tx, ev); err != nil {
			return err
		}
	}
	l.handled.Add(1)
	return nil
}

// order is an incremental event of order aggregateID at version, adding delta to its amount.
func order(aggregateID string, version, delta int64) inbox.Event {
	return inbox.Event{
		ID: newID(), AggregateType: "order", AggregateID: aggregateID, AggregateVersion: version,
		Type: "OrderAmountAdded", SchemaVersion: 1, CommitLSN: uint64(0x16B3748 + version),
		Payload: fmt.Appendf(nil, `{"delta": %d}`, delta), Headers: map[string]string{"trace_id": "t-1"},
	}
}

// fullState is a full-state event of order aggregateID at version, whose amount is amount.
func fullState(aggregateID string, version, amount int64) inbox.Event {
	ev := order(aggregateID, version, 0)
	ev.Type, ev.FullState, ev.Payload = "OrderState", true, fmt.Appendf(nil, `{"amount": %d}`, amount)
	return ev
}

func newID() string {
	var b [16]byte
	rand.Read(b[:])
	b[6], b[8] = b[6]&0x0f|0x40, b[8]&0x3f|0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// publish sends ev in cdc-router's message format and waits for the broker's confirm.
func (l *lab) publish(ev inbox.Event) {
	l.t.Helper()
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
	ctx, cancel := context.WithTimeout(l.ctx, 10*time.Second)
	defer cancel()
	dc, err := l.pub.PublishWithDeferredConfirmWithContext(ctx, l.exchange, ev.AggregateType+"."+ev.Type, true, false,
		amqp.Publishing{MessageId: ev.ID, Type: ev.Type, ContentType: "application/json", Body: ev.Payload,
			Headers: headers, DeliveryMode: amqp.Persistent})
	if err != nil {
		l.t.Fatalf("publish %s: %v", ev.ID, err)
	}
	if ok, err := dc.WaitContext(ctx); err != nil || !ok {
		l.t.Fatalf("publish %s: confirm ack=%v err=%v", ev.ID, ok, err)
	}
}

// get fetches the next delivery with basic.get, waiting up to five seconds for one.
func (l *lab) get(ch *amqp.Channel) amqp.Delivery {
	l.t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		d, ok, err := ch.Get(l.queue, false)
		if err != nil {
			l.t.Fatalf("basic.get: %v", err)
		}
		if ok {
			return d
		}
	}
	l.t.Fatalf("no delivery on %s within 5s", l.queue)
	return amqp.Delivery{}
}

// process decodes a delivery and processes it, failing the test on an error.
func (l *lab) process(p *inbox.Processor, d amqp.Delivery) inbox.Result {
	l.t.Helper()
	ev, err := inbox.DecodeDelivery(d)
	if err != nil {
		l.t.Fatalf("decode delivery: %v", err)
	}
	res, err := p.Process(l.ctx, ev)
	if err != nil {
		l.t.Fatalf("process %s: %v", ev.ID, err)
	}
	return res
}

// count runs a SELECT count(*)-style query returning one integer.
func (l *lab) count(sql string, args ...any) int64 {
	l.t.Helper()
	var n int64
	if err := l.db.QueryRow(l.ctx, sql, args...).Scan(&n); err != nil {
		l.t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// amount is the projected amount of an order (0 when it has no row).
func (l *lab) amount(id string) int64 {
	return l.count(`SELECT coalesce((SELECT amount FROM projection WHERE id = $1), 0)`, id)
}

// ready is the number of messages ready in the lab's queue.
func (l *lab) ready() int {
	l.t.Helper()
	ch := l.channel()
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(l.queue, false, false, false, false, nil)
	if err != nil {
		l.t.Fatalf("inspect queue: %v", err)
	}
	return q.Messages
}

func want[T comparable](t *testing.T, what string, got, expected T) {
	t.Helper()
	if got != expected {
		t.Errorf("%s = %v, want %v", what, got, expected)
	}
}
