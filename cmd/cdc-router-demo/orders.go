package main

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"

	"github.com/jackc/pgx/v5"
)

// createOrders is the business table. version is the aggregate version: every change of an order moves it
// by one in the same transaction as the outbox row that carries it (the producer pattern of
// docs/producers.md).
const createOrders = `CREATE TABLE IF NOT EXISTS orders (
	id         bigserial PRIMARY KEY,
	customer   text NOT NULL,
	amount     numeric NOT NULL,
	status     text NOT NULL DEFAULT 'created',
	version    bigint NOT NULL DEFAULT 1,
	created_at timestamptz NOT NULL DEFAULT now()
);
ALTER TABLE orders ADD COLUMN IF NOT EXISTS status text NOT NULL DEFAULT 'created';
ALTER TABLE orders ADD COLUMN IF NOT EXISTS version bigint NOT NULL DEFAULT 1`

var customers = []string{"ada", "grace", "edsger", "barbara", "ken", "margaret", "dennis", "frances"}

// order is an order written by this run that has not been paid yet, with the version the writer last saw.
type order struct {
	id      int64
	amount  string
	version int64
}

// insertOrder inserts an order and its order.created event (version 1) in one transaction.
func insertOrder(ctx context.Context, conn *pgx.Conn, table string, t *tally) (order, error) {
	customer := customers[rand.IntN(len(customers))]
	o := order{amount: fmt.Sprintf("%d.%02d", 5+rand.IntN(200), rand.IntN(100)), version: 1}
	err := transact(ctx, conn, t, func(tx pgx.Tx) (string, error) {
		err := tx.QueryRow(ctx, "INSERT INTO orders (customer, amount) VALUES ($1, $2::numeric) RETURNING id",
			customer, o.amount).Scan(&o.id)
		if err != nil {
			return "", fmt.Errorf("insert order: %w", err)
		}
		payload := map[string]any{"order_id": o.id, "customer": customer, "amount": o.amount, "currency": "EUR"}
		return insertEvent(ctx, tx, table, o.id, 1, "created", payload)
	})
	return o, err
}

// errConcurrentChange is a change made against a version of the order that is no longer current.
var errConcurrentChange = errors.New("the order changed since it was read")

// insertPaid marks an earlier order paid the producer way: a conditional update at the version the writer
// read, a check that exactly one row changed, and the order.paid event at the next version, all in one
// transaction. A lost race rolls back both, so no version is ever skipped or used twice.
func insertPaid(ctx context.Context, conn *pgx.Conn, table string, o order, t *tally) error {
	return transact(ctx, conn, t, func(tx pgx.Tx) (string, error) {
		tag, err := tx.Exec(ctx, `UPDATE orders SET status = 'paid', version = version + 1
			WHERE id = $1 AND version = $2`, o.id, o.version)
		if err != nil {
			return "", fmt.Errorf("update order: %w", err)
		}
		if tag.RowsAffected() != 1 {
			return "", fmt.Errorf("order %d at version %d: %w", o.id, o.version, errConcurrentChange)
		}
		payload := map[string]any{"order_id": o.id, "amount": o.amount, "method": "card"}
		return insertEvent(ctx, tx, table, o.id, o.version+1, "paid", payload)
	})
}

// transact runs fn in a transaction. The event id fn returns is registered with the tally before the
// commit, so the consumer can never see the event first, and taken back if the commit fails.
func transact(ctx context.Context, conn *pgx.Conn, t *tally, fn func(pgx.Tx) (string, error)) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback(context.Background())
	id, err := fn(tx)
	if err != nil {
		return err
	}
	t.expect(id)
	if err := tx.Commit(ctx); err != nil {
		t.forget(id)
		return fmt.Errorf("commit: %w", err)
	}
	t.committed(1)
	return nil
}

// insertEvent inserts one outbox row with a W3C traceparent header and returns its id.
func insertEvent(ctx context.Context, tx pgx.Tx, table string, orderID, version int64, eventType string, payload map[string]any) (string, error) {
	id := uuid()
	body, err := json.Marshal(payload)
	if err != nil {
		return "", err
	}
	headers, err := json.Marshal(map[string]string{"traceparent": "00-" + randomHex(16) + "-" + randomHex(8) + "-01"})
	if err != nil {
		return "", err
	}
	_, err = tx.Exec(ctx, "INSERT INTO "+table+` (id, aggregate_type, aggregate_id, aggregate_version, event_type, payload, headers)
		VALUES ($1::uuid, 'order', $2, $3, $4, $5::jsonb, $6::jsonb)`,
		id, fmt.Sprint(orderID), version, eventType, string(body), string(headers))
	if err != nil {
		return "", fmt.Errorf("insert into %s: %w", table, err)
	}
	return id, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	crand.Read(b)
	return hex.EncodeToString(b)
}

// uuid returns a random (version 4) UUID.
func uuid() string {
	b := make([]byte, 16)
	crand.Read(b)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b)
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}
