package replication

import (
	"log/slog"
	"time"

	"github.com/cdc-router/cdc-router/migrations"
)

// emitKeyWatch reloads the emit keys into the session's decoder while it streams with --message-prefix, at
// least every migrations.EmitKeyInterval (migrations.EmitKeyWatch: a failed reload keeps the keys loaded).
type emitKeyWatch struct {
	*migrations.EmitKeyWatch
	log *slog.Logger
}

func newEmitKeyWatch(cfg Config, log *slog.Logger) *emitKeyWatch {
	return &emitKeyWatch{migrations.NewEmitKeyWatch(cfg.Schema, cfg.PublicationCheckInterval, cfg.Decode.EmitKeys), log}
}

// due reloads the keys when the interval has passed; without --message-prefix it does nothing.
func (w *emitKeyWatch) due(s *session) {
	if s.cfg.Decode.MessagePrefix == "" || !w.Due() {
		return
	}
	ctx, end := s.onPostgres("reload the emit keys", 10*time.Second)
	defer end()
	keys, changed, err := w.Reload(ctx, s.sql)
	if err != nil {
		w.log.Warn("could not reload the emit keys; keeping those loaded", "error", err)
		return
	}
	if changed {
		w.log.Info("emit keys reloaded", "keys", len(keys))
		s.dec.SetEmitKeys(keys)
	}
}
