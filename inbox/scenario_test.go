package inbox_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/inbox"
	"github.com/cdc-router/cdc-router/inbox/runner"
)

const sourceSQL = `
CREATE SCHEMA source;
CREATE TABLE source.orders (id text PRIMARY KEY, amount bigint NOT NULL, version bigint NOT NULL);
CREATE TABLE source.outbox (id uuid PRIMARY KEY, aggregate_type text NOT NULL, aggregate_id text NOT NULL,
	aggregate_version bigint NOT NULL, event_type text NOT NULL, payload jsonb NOT NULL);
INSERT INTO source.orders VALUES ('42', 0, 0);`

// writeOrder is the source's business transaction: the order change and its outbox row, together.
func writeOrder(ctx context.Context, db *pgx.Conn, ev inbox.Event, commit bool) error {
	tx, err := db.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	tag, err := tx.Exec(ctx, `UPDATE source.orders SET amount = amount + ($2::jsonb->>'delta')::bigint, version = $3
		WHERE id = $1 AND version = $3 - 1`, ev.AggregateID, ev.Payload, ev.AggregateVersion)
	if err != nil || tag.RowsAffected() != 1 {
		return errors.Join(err, errors.New("order is not at the previous version"))
	}
	if _, err := tx.Exec(ctx, `INSERT INTO source.outbox VALUES ($1, $2, $3, $4, $5, $6)`, ev.ID, ev.AggregateType,
		ev.AggregateID, ev.AggregateVersion, ev.Type, ev.Payload); err != nil {
		return err
	}
	if !commit {
		return tx.Rollback(ctx)
	}
	return tx.Commit(ctx)
}

// relay publishes every committed outbox row, as cdc-router would, and returns how many it published.
func (l *lab) relay() int {
	l.T.Helper()
	rows, err := l.DB.Query(l.Ctx, `SELECT id::text, aggregate_type, aggregate_id, aggregate_version, event_type,
		payload::text FROM source.outbox ORDER BY aggregate_id, aggregate_version`)
	if err != nil {
		l.T.Fatal(err)
	}
	var events []inbox.Event
	for rows.Next() {
		ev := inbox.Event{SchemaVersion: 1, CommitLSN: 1}
		if err := rows.Scan(&ev.ID, &ev.AggregateType, &ev.AggregateID, &ev.AggregateVersion, &ev.Type, &ev.Payload); err != nil {
			l.T.Fatal(err)
		}
		events = append(events, ev)
	}
	if err := rows.Err(); err != nil {
		l.T.Fatal(err)
	}
	for _, ev := range events {
		l.Publish(ev)
	}
	return len(events)
}

// Scenario 1: the source transaction rolls back, so neither the order change nor its event exists;
// nothing is published and the projection is untouched. The committed retry flows through.
func TestSourceTransactionRolledBack(t *testing.T) {
	l := newLab(t)
	if _, err := l.DB.Exec(l.Ctx, sourceSQL); err != nil {
		t.Fatal(err)
	}
	p := l.Processor(inbox.Config{})
	e1 := order("42", 1, 10)
	if err := writeOrder(l.Ctx, l.DB, e1, false); err != nil {
		t.Fatal(err)
	}
	outbox, published0 := l.Count(`SELECT count(*) FROM source.outbox`), l.relay()
	want(t, "outbox rows after rollback", outbox, 0)
	want(t, "published after rollback", published0, 0)
	want(t, "queued after rollback", l.Ready(), 0)
	want(t, "source amount after rollback", l.Count(`SELECT amount FROM source.orders`), 0)

	if err := writeOrder(l.Ctx, l.DB, e1, true); err != nil {
		t.Fatal(err)
	}
	published := l.relay()
	ch := l.Channel()
	d := l.Get(ch)
	res := l.Process(p, d)
	d.Ack(false)
	want(t, "outcome", res.Outcome, inbox.Applied)
	want(t, "projection amount", l.Amount("42"), 10)
	summary(t, "rolled-back: outbox=%d published=%d; committed: outbox=%d published=%d applied=%d inbox=%d amount=%d",
		outbox, published0, l.Count(`SELECT count(*) FROM source.outbox`), published, l.Handled.Load(),
		l.Count(`SELECT count(*) FROM inbox.inbox`), l.Amount("42"))
}

// Scenario 2: the consumer's transaction fails after its business write; the inbox row rolls back with
// it, the delivery is requeued, and the redelivery is applied (not blocked as "already processed").
func TestConsumerTransactionRolledBackThenRedelivered(t *testing.T) {
	l := newLab(t)
	p := l.Processor(inbox.Config{})
	failures := 1
	l.Fault = func(context.Context, pgx.Tx, inbox.Event) error {
		if failures > 0 {
			failures--
			return errors.New("injected failure after the projection write")
		}
		return nil
	}
	l.Publish(order("42", 1, 10))
	ch := l.Channel()

	d1 := l.Get(ch)
	ev, err := runner.DecodeDelivery(d1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Process(l.Ctx, ev); err == nil {
		t.Fatal("first attempt: want the injected error")
	}
	inboxAfter, amountAfter := l.Count(`SELECT count(*) FROM inbox.inbox`), l.Amount("42")
	want(t, "inbox rows after rollback", inboxAfter, 0)
	want(t, "amount after rollback", amountAfter, 0)
	if err := d1.Nack(false, true); err != nil {
		t.Fatal(err)
	}

	d2 := l.Get(ch)
	want(t, "second delivery redelivered", d2.Redelivered, true)
	want(t, "same message", d2.MessageId, d1.MessageId)
	res := l.Process(p, d2)
	d2.Ack(false)
	want(t, "outcome", res.Outcome, inbox.Applied)
	want(t, "amount", l.Amount("42"), 10)
	want(t, "queue", l.Ready(), 0)
	summary(t, "deliveries=2 first=rolled-back(inbox=%d amount=%d) redelivered=%v applied=%d inbox=%d amount=%d",
		inboxAfter, amountAfter, d2.Redelivered, l.Handled.Load(), l.Count(`SELECT count(*) FROM inbox.inbox`), l.Amount("42"))
}

// Scenario 4: an event id seen before with other content is never applied and never silently
// acknowledged: it lands in the failed table with both fingerprints.
func TestSameIDDifferentContent(t *testing.T) {
	l := newLab(t)
	p := l.Processor(inbox.Config{})
	e1 := order("42", 1, 10)
	forged := e1
	forged.Payload = []byte(`{"delta": 99}`)
	l.Publish(e1)
	l.Publish(forged)
	ch := l.Channel()
	var outcomes []inbox.Outcome
	for range 2 {
		d := l.Get(ch)
		outcomes = append(outcomes, l.Process(p, d).Outcome)
		d.Ack(false)
	}
	want(t, "first outcome", outcomes[0], inbox.Applied)
	want(t, "second outcome", outcomes[1], inbox.Conflict)

	again, err := p.Process(l.Ctx, forged)
	if err != nil {
		t.Fatal(err)
	}
	want(t, "conflict again", again.Outcome, inbox.Conflict)

	var stored, received []byte
	var attempts int
	err = l.DB.QueryRow(l.Ctx, `SELECT stored_fingerprint, received_fingerprint, attempts FROM inbox.failed
		WHERE event_id = $1 AND reason = 'conflict'`, e1.ID).Scan(&stored, &received, &attempts)
	if err != nil {
		t.Fatalf("failed row: %v", err)
	}
	want(t, "stored fingerprint", string(stored), string(e1.Fingerprint()))
	want(t, "received fingerprint", string(received), string(forged.Fingerprint()))
	want(t, "attempts", attempts, 2)
	want(t, "amount", l.Amount("42"), 10)
	want(t, "queue", l.Ready(), 0)
	summary(t, "deliveries=2 outcomes=%v,%v applied=%d failed=%d attempts=%d inbox=%d amount=%d",
		outcomes[0], outcomes[1], l.Handled.Load(), l.Count(`SELECT count(*) FROM inbox.failed`), attempts,
		l.Count(`SELECT count(*) FROM inbox.inbox`), l.Amount("42"))
}
