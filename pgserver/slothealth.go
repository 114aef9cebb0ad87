package pgserver

import (
	"context"
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

// ReadSlotHealth reads the slot's health over an ordinary connection.
func ReadSlotHealth(ctx context.Context, sql *pgx.Conn, slot string) (SlotHealth, error) {
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
