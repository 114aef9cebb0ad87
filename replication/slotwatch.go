package replication

import (
	"fmt"
	"time"

	"github.com/cdc-router/cdc-router/pgserver"
)

// slotWatch reads the slot's health every pgserver.SlotHealthInterval while the stream runs, also while it waits
// on a full publish window (the time a slot falls behind). A failed read is logged and retried at the next
// interval; it never stops the stream.
type slotWatch struct {
	next   time.Time
	failed bool
}

// due reads the health when the interval has passed. A read that fails and leaves the ordinary connection
// closed (pgx closes it when a wait ends mid-query: PostgreSQL stopped answering) ends the stream, since the
// stored position and the quarantine need that connection too; any other failure only keeps the last values.
func (w *slotWatch) due(s *session) error {
	if time.Now().Before(w.next) || s.ctx.Err() != nil { // no reads once the stop is requested: it is bounded
		return nil
	}
	w.next = time.Now().Add(pgserver.SlotHealthInterval)
	ctx, cancel := s.stop.bounded(s.bounded(5 * time.Second))
	defer cancel()
	h, err := pgserver.ReadSlotHealth(ctx, s.sql, s.cfg.Slot)
	if err != nil && s.sql.IsClosed() {
		return fmt.Errorf("read the slot's health: %w", err)
	}
	if err != nil {
		if !w.failed {
			s.log.Warn("could not read the slot's health from pg_replication_slots; the slot metrics keep their last values", "error", err)
		}
		w.failed = true
		return nil
	}
	if w.failed {
		s.log.Info("reading the slot's health again")
	}
	w.failed = false
	if prev := s.stats.Slot(); h.WALStatus != prev.WALStatus && (h.WALStatus == "unreserved" || h.WALStatus == "lost") {
		s.log.Error("the slot's WAL is no longer reserved: PostgreSQL invalidates it (and events are lost) once max_slot_wal_keep_size is passed",
			"wal_status", h.WALStatus, "safe_wal_bytes", h.SafeWALBytes, "retained_wal_bytes", h.RetainedBytes)
	}
	s.stats.SetSlot(h)
	return nil
}
