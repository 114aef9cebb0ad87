package replication

import (
	"log/slog"
	"maps"
	"time"

	"github.com/cdc-router/cdc-router/migrations"
)

// EmitKeyInterval is the longest time between two reloads of the emit keys while a stream with
// --message-prefix runs (shorter when PublicationCheckInterval is): a key `migrate --rotate-emit-key` adds
// signs only migrations.EmitKeyDelay later, so the router holds it before the first message it signs.
const EmitKeyInterval = 30 * time.Second

// emitKeyWatch reloads the emit keys into the session's decoder while it streams. A failed reload keeps
// the keys the decoder has (a message signed with a key it lacks is quarantined, never published) and is
// tried again at the next interval.
type emitKeyWatch struct {
	schema   string
	interval time.Duration
	log      *slog.Logger
	keys     map[uint32][]byte
	next     time.Time
}

func newEmitKeyWatch(cfg Config, log *slog.Logger) *emitKeyWatch {
	interval := min(EmitKeyInterval, cfg.PublicationCheckInterval)
	return &emitKeyWatch{schema: cfg.Schema, interval: interval, log: log, keys: cfg.Decode.EmitKeys, next: time.Now().Add(interval)}
}

// due reloads the keys when the interval has passed; without --message-prefix it does nothing.
func (w *emitKeyWatch) due(s *session) {
	if s.cfg.Decode.MessagePrefix == "" || time.Now().Before(w.next) {
		return
	}
	w.next = time.Now().Add(w.interval)
	ctx, cancel := s.stop.bounded(10 * time.Second)
	defer cancel()
	keys, err := migrations.LoadEmitKeys(ctx, s.sql, w.schema)
	if err != nil {
		w.log.Warn("could not reload the emit keys; keeping those loaded", "error", err)
		return
	}
	if !maps.EqualFunc(keys, w.keys, func(a, b []byte) bool { return string(a) == string(b) }) {
		w.log.Info("emit keys reloaded", "keys", len(keys))
		w.keys = keys
		s.dec.SetEmitKeys(keys)
	}
}
