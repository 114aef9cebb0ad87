package offsets

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/internal/cdc"
)

// Position is an acknowledged position as stored, with the cluster it belongs to.
type Position struct {
	LSN       cdc.LSN
	SystemID  string // IDENTIFY_SYSTEM systemid of the cluster that produced LSN
	Timeline  int32
	UpdatedAt time.Time
}

// IdleInterval is how often SaveIdle writes at most: an advance that only keepalives made is stored about
// once a minute, since each write is itself WAL that the next keepalive reports.
const IdleInterval = time.Minute

// Store reads and writes the stored position of one slot in the router's table. It is not safe for
// concurrent use; the stream's goroutine owns it.
type Store struct {
	conn     *pgx.Conn
	table    string // schema-qualified, sanitized
	slot     string
	interval time.Duration
	idle     time.Duration // IdleInterval; shorter in tests

	saved     cdc.LSN
	lastWrite time.Time
}

// NewStore returns a Store on conn (an ordinary, non-replication connection) for slot, writing to
// <schema>.positions at most once per interval (0 means one second).
func NewStore(conn *pgx.Conn, schema, slot string, interval time.Duration) *Store {
	if interval <= 0 {
		interval = time.Second
	}
	return &Store{conn: conn, table: pgx.Identifier{schema, "positions"}.Sanitize(), slot: slot, interval: interval,
		idle: IdleInterval}
}

// Load returns the stored position of the slot; ok is false when none was ever stored.
func (s *Store) Load(ctx context.Context) (p Position, ok bool, err error) {
	var lsn string
	err = s.conn.QueryRow(ctx, "SELECT lsn::text, system_id, timeline, updated_at FROM "+s.table+" WHERE slot = $1",
		s.slot).Scan(&lsn, &p.SystemID, &p.Timeline, &p.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Position{}, false, nil
	}
	if err != nil {
		return Position{}, false, fmt.Errorf("load stored position: %w", err)
	}
	if p.LSN, err = cdc.ParseLSN(lsn); err != nil {
		return Position{}, false, err
	}
	s.saved, s.lastWrite = p.LSN, time.Now()
	return p, true, nil
}

// Saved is the position last stored or loaded by this Store.
func (s *Store) Saved() cdc.LSN { return s.saved }

// SaveIdle stores p when no transaction ended since the last write, so that its advance is the keepalives'
// alone: at most once per IdleInterval since the last write or load. On an idle database that advance is
// mostly the WAL of the router's own last write; storing it at once would make the next keepalive report
// the new write, and the router would update its row every second forever. The slot's confirmed_flush_lsn
// still follows every advance through the standby status updates, which write nothing, and a stored
// position behind it is harmless: START_REPLICATION starts from the later of the two.
func (s *Store) SaveIdle(ctx context.Context, p Position) error {
	if time.Since(s.lastWrite) < s.idle {
		return nil
	}
	return s.Save(ctx, p, true)
}

// Due reports whether Save (SaveIdle when idle) would write p now, so that a caller can skip preparing the
// write (a context with a deadline) on the many calls that write nothing.
func (s *Store) Due(p Position, force, idle bool) bool {
	if idle && !force {
		if time.Since(s.lastWrite) < s.idle {
			return false
		}
		force = true
	}
	return p.LSN != 0 && p.LSN > s.saved && (force || time.Since(s.lastWrite) >= s.interval)
}

// Save stores p when its LSN moved and at least the interval passed since the last write, or at once when
// force is set (shutdown). The stored LSN never goes back.
func (s *Store) Save(ctx context.Context, p Position, force bool) error {
	if p.LSN == 0 || p.LSN <= s.saved || (!force && time.Since(s.lastWrite) < s.interval) {
		return nil
	}
	_, err := s.conn.Exec(ctx, "INSERT INTO "+s.table+` AS p (slot, system_id, timeline, lsn, updated_at)
		VALUES ($1, $2, $3, $4::pg_lsn, now())
		ON CONFLICT (slot) DO UPDATE SET system_id = EXCLUDED.system_id, timeline = EXCLUDED.timeline,
			lsn = GREATEST(p.lsn, EXCLUDED.lsn), updated_at = now()`,
		s.slot, p.SystemID, p.Timeline, p.LSN.String())
	if err != nil {
		return fmt.Errorf("store position: %w", err)
	}
	s.saved, s.lastWrite = p.LSN, time.Now()
	return nil
}

// Delete removes the stored position of the slot, for an operator who re-snapshots after a lost slot.
func (s *Store) Delete(ctx context.Context) error {
	_, err := s.conn.Exec(ctx, "DELETE FROM "+s.table+" WHERE slot = $1", s.slot)
	s.saved = 0
	return err
}
