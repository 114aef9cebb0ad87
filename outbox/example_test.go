package outbox_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cdc-router/cdc-router/outbox"
)

// Pay an order and write its event in one transaction, at the order's next version, retrying the whole
// transaction when a concurrent request took that version first.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://app@db/shop")
	if err != nil {
		panic(err)
	}
	// From an incoming request's trace (with OpenTelemetry: propagation.TraceContext{}.Inject into a
	// propagation.MapCarrier, then its "traceparent" and "tracestate").
	ctx = outbox.WithTraceParent(ctx, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "")

	var w outbox.Writer // public.outbox, as `cdc-router migrate` creates it
	pay := func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE orders SET status = 'paid' WHERE id = $1`, 42); err != nil {
			return err
		}
		payload, _ := json.Marshal(map[string]any{"order_id": 42, "method": "card"})
		_, err := w.Write(ctx, tx, outbox.Event{AggregateType: "order", AggregateID: "42", Type: "paid", Payload: payload})
		return err
	}
	for attempt := 1; ; attempt++ {
		err = pgx.BeginFunc(ctx, pool, pay)
		if err == nil || !outbox.Retryable(err) || attempt == 5 {
			break
		}
		time.Sleep(time.Duration(attempt) * 10 * time.Millisecond)
	}
	if errors.Is(err, outbox.ErrVersionConflict) {
		err = fmt.Errorf("order 42 is busy, try again: %w", err) // five attempts lost the race: HTTP 409
	}
	if err != nil {
		log.Print(err)
	}
}

// The same with database/sql and pgx's stdlib driver (import _ "github.com/jackc/pgx/v5/stdlib"), into a
// table of its own name, with the version kept on the business row and moved by a conditional update.
func ExampleWriter_WriteSQL() {
	ctx := context.Background()
	db, err := sql.Open("pgx", "postgres://app@db/shop")
	if err != nil {
		panic(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		panic(err)
	}
	defer tx.Rollback() // a no-op after Commit
	var version int64
	err = tx.QueryRowContext(ctx, `UPDATE orders SET status = 'paid', version = version + 1
		WHERE id = $1 AND version = $2 RETURNING version`, 42, 3).Scan(&version)
	if errors.Is(err, sql.ErrNoRows) {
		return // another request changed the order first: re-read it and decide again
	} else if err != nil {
		panic(err)
	}
	w := outbox.Writer{Table: "sales.outbox"}
	if _, err := w.WriteSQL(ctx, tx, outbox.Event{AggregateType: "order", AggregateID: "42", Version: version,
		Type: "paid", Payload: []byte(`{"order_id": 42}`)}); err != nil {
		panic(err)
	}
	if err := tx.Commit(); err != nil {
		panic(err)
	}
}
