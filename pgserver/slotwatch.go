package pgserver

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
)

// SlotWatch reads a slot's health every SlotHealthInterval while a stream runs, also while it waits on a
// full publish window (the time a slot falls behind). A failed read is logged once and retried at the next
// interval; it never stops the stream unless it left the connection closed.
type SlotWatch struct {
	next   time.Time
	failed bool
}

// Due reports whether a read is due, and if so counts the next interval from now.
func (w *SlotWatch) Due() bool {
	if time.Now().Before(w.next) {
		return false
	}
	w.next = time.Now().Add(SlotHealthInterval)
	return true
}

// Read reads slot's health from pg_replication_slots; prev is the health read before, so that a slot whose
// WAL stops being reserved is logged as an error once. ok is false when the read failed: the caller keeps the
// last values. A read that fails and leaves sql closed (pgx closes it when a wait ends mid-query: PostgreSQL
// stopped answering) is an error, since the connection's other users need it too.
func (w *SlotWatch) Read(ctx context.Context, sql *pgx.Conn, slot string, prev SlotHealth, log *slog.Logger) (h SlotHealth, ok bool, err error) {
	h, err = ReadSlotHealth(ctx, sql, slot)
	if err != nil && sql.IsClosed() {
		return h, false, fmt.Errorf("read the slot's health: %w", err)
	}
	if err != nil {
		if !w.failed {
			log.Warn("could not read the slot's health from pg_replication_slots; the slot metrics keep their last values", "error", err)
		}
		w.failed = true
		return h, false, nil
	}
	if w.failed {
		log.Info("reading the slot's health again")
	}
	w.failed = false
	if h.WALStatus != prev.WALStatus && (h.WALStatus == "unreserved" || h.WALStatus == "lost") {
		log.Error("the slot's WAL is no longer reserved: PostgreSQL invalidates it (and events are lost) once max_slot_wal_keep_size is passed",
			"wal_status", h.WALStatus, "safe_wal_bytes", h.SafeWALBytes, "retained_wal_bytes", h.RetainedBytes)
	}
	return h, true, nil
}
