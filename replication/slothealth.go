package replication

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// SlotHealthInterval is how often a streaming router reads its slot's health from pg_replication_slots.
const SlotHealthInterval = 15 * time.Second

// SlotHealth is the slot's row in pg_replication_slots as last read by the streaming router, for the
// metrics and the readiness check: what stands between the slot and its invalidation.
type SlotHealth struct {
	Checked   time.Time // when it was read; zero before the first read
	Active    bool      // a walsender streams from the slot
	WALStatus string    // reserved, extended, unreserved or lost (PostgreSQL's wal_status)
	// SafeWALBytes is safe_wal_size: the WAL that can still be written before the slot is invalidated;
	// SafeWALKnown is false when PostgreSQL leaves it NULL (max_slot_wal_keep_size = -1, no limit).
	SafeWALBytes  int64
	SafeWALKnown  bool
	RetainedBytes int64 // pg_current_wal_lsn() - restart_lsn: the WAL kept on disk for the slot
	// MaxKeepBytes is max_slot_wal_keep_size in bytes, -1 when unlimited.
	MaxKeepBytes int64
}

// slotHealthQuery reads one slot's health. safe_wal_size and wal_status exist since PostgreSQL 13.
const slotHealthQuery = `SELECT active, coalesce(wal_status, ''), safe_wal_size,
	coalesce(pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn), 0)::bigint,
	pg_size_bytes(current_setting('max_slot_wal_keep_size'))
	FROM pg_replication_slots WHERE slot_name = $1`

// readSlotHealth reads the slot's health over an ordinary connection.
func readSlotHealth(ctx context.Context, sql *pgx.Conn, slot string) (SlotHealth, error) {
	var h SlotHealth
	var safe *int64
	err := sql.QueryRow(ctx, slotHealthQuery, slot).Scan(&h.Active, &h.WALStatus, &safe, &h.RetainedBytes, &h.MaxKeepBytes)
	if err != nil {
		return h, err
	}
	h.Checked = time.Now()
	if safe != nil {
		h.SafeWALBytes, h.SafeWALKnown = *safe, true
	}
	return h, nil
}

// slotWatch reads the slot's health every SlotHealthInterval while the stream runs, also while it waits
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
	w.next = time.Now().Add(SlotHealthInterval)
	ctx, cancel := context.WithTimeout(context.Background(), s.bounded(5*time.Second))
	defer cancel()
	h, err := readSlotHealth(ctx, s.sql, s.cfg.Slot)
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
	s.stats.setSlot(h)
	return nil
}
