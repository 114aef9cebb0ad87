package outbox_test

import (
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/outbox"
)

// BenchmarkWrite is one committed transaction per operation, on one aggregate whose history grows, through
// a pool: the next version assigned by Write, an explicit version, and the plain INSERT that Write replaces.
func BenchmarkWrite(b *testing.B) {
	payload := []byte(`{"order_id": 42, "amount": "16.06"}`)
	for _, mode := range []string{"next version", "explicit version", "plain insert"} {
		b.Run(mode, func(b *testing.B) {
			d := newDB(b)
			var w outbox.Writer
			var version int64
			b.ResetTimer()
			for b.Loop() {
				version++
				err := pgx.BeginFunc(d.ctx, d.pool, func(tx pgx.Tx) error {
					ev := outbox.Event{AggregateType: "order", AggregateID: "42", Type: "paid", Payload: payload}
					switch mode {
					case "explicit version":
						ev.Version = version
					case "plain insert":
						_, err := tx.Exec(d.ctx, `INSERT INTO outbox (id, aggregate_type, aggregate_id, aggregate_version, event_type, payload)
							VALUES (gen_random_uuid(), 'order', '42', $1, 'paid', $2)`, version, string(payload))
						return err
					}
					_, err := w.Write(d.ctx, tx, ev)
					return err
				})
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
