package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestByteaIDAndKey streams a table whose event id and key are bytea: the message id is the id's bytes in
// lowercase hex, the id and key headers are AMQP byte arrays holding the bytes, and the events of each key
// (two keys differ only past a zero byte) arrive in commit order, written by interleaved transactions.
func TestByteaIDAndKey(t *testing.T) {
	e := mappedEnv(t, "bin_outbox", `CREATE TABLE bin_outbox (id bytea PRIMARY KEY, aggregatetype text NOT NULL,
		k bytea, payload jsonb NOT NULL)`)
	c := e.consume(e.queue)
	e.startMapped("bin_outbox", writeConfig(t, "table.field.event.key=k\n"))
	keys := [][]byte{{0, 0xff}, {0, 0xff, 0}, {0xde, 0xad, 0xbe, 0xef}}
	ctx := context.Background()
	var want []written
	ids := map[string][2][]byte{}
	for i := range 30 {
		err := pgx.BeginFunc(ctx, e.db, func(tx pgx.Tx) error {
			for j := range 2 {
				id := make([]byte, 16)
				_, _ = rand.Read(id)
				key := keys[(i+j)%len(keys)]
				if _, err := tx.Exec(ctx, `INSERT INTO bin_outbox (id, aggregatetype, k, payload) VALUES ($1, 'bin', $2, '{}')`, id, key); err != nil {
					return err
				}
				want = append(want, written{hex.EncodeToString(key), hex.EncodeToString(id)})
				ids[hex.EncodeToString(id)] = [2][]byte{id, key}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	inCommitOrder(t, c, want)
	for _, d := range c.snapshot() {
		row, ok := ids[d.msg.MessageId]
		if !ok {
			continue // inCommitOrder named it
		}
		id, _ := d.msg.Headers["id"].([]byte)
		key, _ := d.msg.Headers["key"].([]byte)
		if !bytes.Equal(id, row[0]) || !bytes.Equal(key, row[1]) {
			t.Errorf("message %s: headers id %#v key %#v, want the bytes %x and %x", d.msg.MessageId, d.msg.Headers["id"],
				d.msg.Headers["key"], row[0], row[1])
		}
	}
}
