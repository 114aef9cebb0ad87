package migrations

import (
	"context"
	"maps"
	"time"

	"github.com/jackc/pgx/v5"
)

// EmitKeyInterval is the longest time between two reloads of the emit keys while a stream with
// --message-prefix runs (shorter when its publication check interval is): a key `migrate --rotate-emit-key`
// adds signs only EmitKeyDelay later, so the router holds it before the first message it signs.
const EmitKeyInterval = 30 * time.Second

// EmitKeyWatch reloads the emit keys at an interval while a stream runs. A failed reload keeps the keys
// loaded (a message signed with a key the stream lacks is quarantined, never published) and is tried again
// at the next interval.
type EmitKeyWatch struct {
	schema   string
	interval time.Duration
	keys     map[uint32][]byte
	next     time.Time
}

// NewEmitKeyWatch watches schema's emit keys, of which keys were loaded at start, reloading them every
// interval, at most every EmitKeyInterval.
func NewEmitKeyWatch(schema string, interval time.Duration, keys map[uint32][]byte) *EmitKeyWatch {
	interval = min(EmitKeyInterval, interval)
	return &EmitKeyWatch{schema: schema, interval: interval, keys: keys, next: time.Now().Add(interval)}
}

// Due reports whether a reload is due, and if so counts the next interval from now.
func (w *EmitKeyWatch) Due() bool {
	if time.Now().Before(w.next) {
		return false
	}
	w.next = time.Now().Add(w.interval)
	return true
}

// Reload reads the keys (LoadEmitKeys) and returns them with changed set when they differ from those
// loaded before; after an error the keys loaded before stay.
func (w *EmitKeyWatch) Reload(ctx context.Context, conn *pgx.Conn) (keys map[uint32][]byte, changed bool, err error) {
	keys, err = LoadEmitKeys(ctx, conn, w.schema)
	if err != nil {
		return nil, false, err
	}
	if maps.EqualFunc(keys, w.keys, func(a, b []byte) bool { return string(a) == string(b) }) {
		return keys, false, nil
	}
	w.keys = keys
	return keys, true, nil
}
