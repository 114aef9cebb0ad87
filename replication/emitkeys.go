package replication

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/migrations"
)

// warnEmitKeyReaders logs, when a stream with --message-prefix starts, the roles other than the keys' owner
// and this router's own that can read the emit keys (migrations.EmitKeyReaders): each can sign an event this
// router publishes as authentic. Not being able to tell is a warning too, never a reason not to start.
func warnEmitKeyReaders(ctx context.Context, sql *pgx.Conn, schema string, log *slog.Logger) {
	readers, err := migrations.EmitKeyReaders(ctx, sql, schema)
	if err != nil {
		log.Warn("could not read which roles can read the emit keys", "error", err)
		return
	}
	var named []string
	for _, r := range readers {
		if r.Role != sql.Config().User {
			named = append(named, r.String())
		}
	}
	if len(named) > 0 {
		log.Warn("roles besides the owner and this router's can read the emit keys, so they can sign events this router "+
			"publishes as authentic; revoke what they do not need (docs/howto/secure.md#who-can-forge-a-signed-event)",
			"schema", schema, "roles", strings.Join(named, ", "))
	}
}

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
