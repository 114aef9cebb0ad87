package offsets

import (
	"context"
	"encoding/binary"
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
	// Mark, when Mark.Confirmed() > 0, is the progress inside the oldest transaction not acknowledged at LSN (see
	// Tracker.Mark). It holds only for the cluster SystemID on Timeline, decoded with the configuration
	// whose fingerprint is MarkConfig: the caller ignores it otherwise.
	Mark       Mark
	MarkConfig string
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
	savedMark Mark
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

// Load returns the stored position of the slot; ok is false when none was ever stored. A mark whose record
// does not have the shape Mark documents (written by hand) is left out.
func (s *Store) Load(ctx context.Context) (p Position, ok bool, err error) {
	var lsn string
	var markLSN, markConfig *string
	var markXid, markDone, markSeen *int64
	var markOpen []byte
	err = s.conn.QueryRow(ctx, "SELECT lsn::text, system_id, timeline, updated_at, mark_commit_lsn::text, mark_xid, "+
		"mark_done, mark_config, mark_seen, mark_open FROM "+s.table+" WHERE slot = $1",
		s.slot).Scan(&lsn, &p.SystemID, &p.Timeline, &p.UpdatedAt, &markLSN, &markXid, &markDone, &markConfig, &markSeen, &markOpen)
	if errors.Is(err, pgx.ErrNoRows) {
		return Position{}, false, nil
	}
	if err != nil {
		return Position{}, false, fmt.Errorf("load stored position: %w", err)
	}
	if p.LSN, err = cdc.ParseLSN(lsn); err != nil {
		return Position{}, false, err
	}
	if markLSN != nil && markXid != nil && markDone != nil && markConfig != nil && *markDone >= 0 {
		commit, err := cdc.ParseLSN(*markLSN)
		if err != nil {
			return Position{}, false, err
		}
		m := Mark{Key: TxnKey{CommitLSN: commit, Xid: uint32(*markXid)}, Done: int(*markDone), Seen: int(*markDone)}
		if markSeen != nil && *markSeen > *markDone { // written by a router that records more than the prefix (017)
			m.Seen = int(*markSeen)
			var read bool
			if m.Open, read = decodeOpen(markOpen, m.Done, m.Seen); !read {
				m.Seen = -1 // not valid: left out
			}
		}
		if m.valid() && m.Confirmed() > 0 {
			p.Mark, p.MarkConfig = m, *markConfig
		}
	}
	s.saved, s.savedMark, s.lastWrite = p.LSN, p.Mark, time.Now()
	return p, true, nil
}

// encodeOpen is the stored form of a mark's Open: the distance of each item from the one before it (from
// Done for the first) less one, as unsigned varints; a byte per item in flight between confirmed ones.
func encodeOpen(m Mark) []byte {
	b := make([]byte, 0, len(m.Open)+8)
	prev := m.Done - 1
	for _, o := range m.Open {
		b = binary.AppendUvarint(b, uint64(o-prev-1))
		prev = o
	}
	return b
}

// decodeOpen reads encodeOpen's form back; ok is false when b does not describe items within [done, seen).
func decodeOpen(b []byte, done, seen int) (open []int, ok bool) {
	prev := done - 1
	for len(b) > 0 {
		d, n := binary.Uvarint(b)
		if n <= 0 || d >= uint64(seen-prev) || len(open) >= MaxOpen {
			return nil, false
		}
		prev += int(d) + 1
		open = append(open, prev)
		b = b[n:]
	}
	return open, true
}

// Saved is the position last stored or loaded by this Store.
func (s *Store) Saved() cdc.LSN { return s.saved }

// moved reports whether p is news to the store: a later LSN, or another mark. A moved mark is progress
// inside the oldest transaction not acknowledged, which an advance of keepalives never makes: it is never
// held back for the idle interval.
func (s *Store) moved(p Position) (moved, markMoved bool) {
	if p.LSN == 0 || p.LSN < s.saved {
		return false, false
	}
	a, b := p.Mark, s.savedMark
	markMoved = a.Key != b.Key || a.Done != b.Done || a.Seen != b.Seen || len(a.Open) != len(b.Open)
	return p.LSN > s.saved || markMoved, markMoved
}

// SaveIdle stores p when no transaction ended since the last write, so that its advance is the keepalives'
// alone: at most once per IdleInterval since the last write or load. On an idle database that advance is
// mostly the WAL of the router's own last write; storing it at once would make the next keepalive report
// the new write, and the router would update its row every second forever. The slot's confirmed_flush_lsn
// still follows every advance through the standby status updates, which write nothing, and a stored
// position behind it is harmless: START_REPLICATION starts from the later of the two.
func (s *Store) SaveIdle(ctx context.Context, p Position) error {
	if _, markMoved := s.moved(p); markMoved {
		return s.Save(ctx, p, false)
	}
	if time.Since(s.lastWrite) < s.idle {
		return nil
	}
	return s.Save(ctx, p, true)
}

// Due reports whether Save (SaveIdle when idle) would write p now, so that a caller can skip preparing the
// write (a context with a deadline) on the many calls that write nothing.
func (s *Store) Due(p Position, force, idle bool) bool {
	moved, markMoved := s.moved(p)
	if idle && !force && !markMoved {
		if time.Since(s.lastWrite) < s.idle {
			return false
		}
		force = true
	}
	return moved && (force || time.Since(s.lastWrite) >= s.interval)
}

// Save stores p when its LSN or its mark moved and at least the interval passed since the last write, or at
// once when force is set (shutdown). The stored LSN never goes back. A mark is stored in the same row write
// as its LSN, cluster and timeline, and only with an LSN at least as far as the stored one (a write that
// would go back clears it instead: a mark is worth only duplicates saved, never a doubt).
func (s *Store) Save(ctx context.Context, p Position, force bool) error {
	if moved, _ := s.moved(p); !moved || (!force && time.Since(s.lastWrite) < s.interval) {
		return nil
	}
	var markLSN, markConfig *string
	var markXid, markDone, markSeen *int64
	var markOpen []byte
	p.Mark.Seen = max(p.Mark.Seen, p.Mark.Done) // a mark of the prefix alone
	if p.Mark.Confirmed() > 0 && p.Mark.valid() {
		l, x, d, n := p.Mark.Key.CommitLSN.String(), int64(p.Mark.Key.Xid), int64(p.Mark.Done), int64(p.Mark.Seen)
		markLSN, markXid, markDone, markSeen, markConfig = &l, &x, &d, &n, &p.MarkConfig
		markOpen = encodeOpen(p.Mark)
	}
	_, err := s.conn.Exec(ctx, "INSERT INTO "+s.table+` AS p (slot, system_id, timeline, lsn, updated_at,
			mark_commit_lsn, mark_xid, mark_done, mark_config, mark_seen, mark_open)
		VALUES ($1, $2, $3, $4::pg_lsn, now(), $5::pg_lsn, $6, $7, $8, $9, $10)
		ON CONFLICT (slot) DO UPDATE SET system_id = EXCLUDED.system_id, timeline = EXCLUDED.timeline,
			lsn = GREATEST(p.lsn, EXCLUDED.lsn), updated_at = now(),
			mark_commit_lsn = CASE WHEN EXCLUDED.lsn >= p.lsn THEN EXCLUDED.mark_commit_lsn END,
			mark_xid = CASE WHEN EXCLUDED.lsn >= p.lsn THEN EXCLUDED.mark_xid END,
			mark_done = CASE WHEN EXCLUDED.lsn >= p.lsn THEN EXCLUDED.mark_done END,
			mark_config = CASE WHEN EXCLUDED.lsn >= p.lsn THEN EXCLUDED.mark_config END,
			mark_seen = CASE WHEN EXCLUDED.lsn >= p.lsn THEN EXCLUDED.mark_seen END,
			mark_open = CASE WHEN EXCLUDED.lsn >= p.lsn THEN EXCLUDED.mark_open END`,
		s.slot, p.SystemID, p.Timeline, p.LSN.String(), markLSN, markXid, markDone, markConfig, markSeen, markOpen)
	if err != nil {
		return fmt.Errorf("store position: %w", err)
	}
	s.saved, s.savedMark, s.lastWrite = p.LSN, p.Mark, time.Now()
	return nil
}

// Delete removes the stored position of the slot, for an operator who re-snapshots after a lost slot.
func (s *Store) Delete(ctx context.Context) error {
	_, err := s.conn.Exec(ctx, "DELETE FROM "+s.table+" WHERE slot = $1", s.slot)
	s.saved, s.savedMark = 0, Mark{}
	return err
}
