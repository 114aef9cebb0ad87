package admin

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cdc-router/cdc-router/internal/cdc"
)

// ResetOptions are what Reset needs to see the slot as the router reads it, and whether it may drop
// unpublished changes.
type ResetOptions struct {
	Publication   string // the router's --publication (its shard's with --shard)
	MessagePrefix string // the router's --message-prefix; empty: only inserts count
	Force         bool   // drop the slot even when it holds unpublished changes, or when they cannot be counted

	// InFlightWait bounds how long Reset waits for the transactions of the database that are open (with a
	// transaction ID) or prepared to end before it counts the slot's changes (reset --wait; 0: it does
	// not wait); OnInFlight, when set, is called once with them as the wait begins. Past the bound Reset
	// refuses naming them, unless IgnoreInFlight: then it goes on and returns them in
	// Unpublished.InFlight. Force does not cover them: their events cannot be counted, not even as "at
	// least".
	InFlightWait   time.Duration
	OnInFlight     func([]InFlight)
	IgnoreInFlight bool

	// PeekLimit bounds the rows the peek decodes (Begin, Commit, Relation and the changes alike; default
	// DefaultPeekLimit); past it the count is "at least". PeekTimeout bounds its time (DefaultPeekTimeout).
	PeekLimit   int
	PeekTimeout time.Duration
}

// Bounds of the peek of a slot at reset: a slot holding GBs of WAL is not decoded whole to be counted.
const (
	DefaultPeekLimit   = 100000
	DefaultPeekTimeout = 30 * time.Second
)

// Unpublished is what a slot holds past the router's acknowledged position: the events a reset would lose.
type Unpublished struct {
	Inserts, Messages int64     // inserts into the publication's tables; logical messages with the prefix
	AtLeast           bool      // the peek stopped at its bound: there may be more
	First, Last       cdc.LSN   // the end positions of the first and last transaction holding them
	From, To          time.Time // their commit times (zero for a non-transactional message only)
	NotCounted        string    // with ResetOptions.Force: why they could not be counted
	// InFlight are, with ResetOptions.IgnoreInFlight, the transactions still open or prepared when the
	// slot was dropped: their events are in none of the counts, and will not be published.
	InFlight []InFlight
}

// Events is the number of unpublished events.
func (u Unpublished) Events() int64 { return u.Inserts + u.Messages }

func (u Unpublished) String() string {
	n := fmt.Sprint(u.Events())
	if u.AtLeast {
		n = "at least " + n
	}
	s := fmt.Sprintf("%s unpublished events (%d inserts into the publication's tables", n, u.Inserts)
	if u.Messages > 0 {
		s += fmt.Sprintf(", %d logical decoding messages", u.Messages)
	}
	s += fmt.Sprintf(") in transactions that ended from %s to %s", u.First, u.Last)
	if !u.From.IsZero() {
		s += fmt.Sprintf(", committed from %s to %s", u.From.UTC().Format(time.RFC3339), u.To.UTC().Format(time.RFC3339))
	}
	return s
}

// peekUnpublished decodes the slot's pending changes without consuming them
// (pg_logical_slot_peek_binary_changes with the router's pgoutput options: proto_version 1, the
// publication, messages when a prefix is set) and counts the inserts and the messages with the prefix in
// transactions that end past stored (the router's stored position, or the slot's confirmed_flush_lsn when
// it is later). The slot must be inactive. Its time is bounded by opts.PeekTimeout, its rows by
// opts.PeekLimit. An error is PostgreSQL's, wrapped: the caller refuses to drop what it cannot count.
func peekUnpublished(ctx context.Context, conn *pgx.Conn, slot string, stored cdc.LSN, opts ResetOptions) (Unpublished, error) {
	var u Unpublished
	limit, timeout := opts.PeekLimit, opts.PeekTimeout
	if limit <= 0 {
		limit = DefaultPeekLimit
	}
	if timeout <= 0 {
		timeout = DefaultPeekTimeout
	}
	// PostgreSQL 18 decodes without a missing publication (it only warns), which would count nothing.
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)`, opts.Publication).
		Scan(&exists); err != nil {
		return u, fmt.Errorf("read publications: %w", err)
	}
	if !exists {
		return u, fmt.Errorf("publication %q %w", opts.Publication, errNoPublication)
	}
	options := []string{"proto_version", "1", "publication_names", pgx.Identifier{opts.Publication}.Sanitize()}
	var prefix []byte // the bytes of a message's prefix field: the prefix and its terminating NUL
	if opts.MessagePrefix != "" {
		options = append(options, "messages", "true")
		prefix = append([]byte(opts.MessagePrefix), 0)
	}
	// pgoutput rows: 'B' begin, 'C' commit (flags, commit LSN, end LSN, commit time in µs since 2000), 'I'
	// insert, 'M' message (flags, LSN, prefix, NUL, ...). A Commit row's lsn is its transaction's end.
	const query = `WITH peek AS MATERIALIZED (
			SELECT lsn, xid, data, get_byte(data, 0) AS kind FROM pg_logical_slot_peek_binary_changes($1, NULL, $2, VARIADIC $3::text[])),
		commits AS (SELECT xid, max(lsn) AS end_lsn,
			max(timestamptz '2000-01-01 00:00:00+00' + ('x' || encode(substring(data FROM 19 FOR 8), 'hex'))::bit(64)::bigint * interval '1 microsecond') AS committed
			FROM peek WHERE kind = 67 GROUP BY xid),
		pending AS (SELECT p.kind, coalesce(c.end_lsn, p.lsn) AS end_lsn, c.committed FROM peek p LEFT JOIN commits c USING (xid)
			WHERE coalesce(c.end_lsn, p.lsn) > $4::pg_lsn
			AND (p.kind = 73 OR p.kind = 77 AND $5::bytea IS NOT NULL AND substring(p.data FROM 11 FOR length($5::bytea)) = $5::bytea))
		SELECT (SELECT count(*) FROM peek), count(*) FILTER (WHERE kind = 73), count(*) FILTER (WHERE kind = 77),
			coalesce(min(end_lsn), '0/0')::text, coalesce(max(end_lsn), '0/0')::text, min(committed), max(committed) FROM pending`
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL statement_timeout = %d", timeout.Milliseconds())); err != nil {
			return err
		}
		var rows int64
		var first, last string
		var from, to *time.Time
		if err := tx.QueryRow(ctx, query, slot, limit, options, stored.String(), prefix).Scan(&rows, &u.Inserts,
			&u.Messages, &first, &last, &from, &to); err != nil {
			return err
		}
		u.AtLeast = rows >= int64(limit)
		u.First, _ = cdc.ParseLSN(first)
		u.Last, _ = cdc.ParseLSN(last)
		if from != nil && to != nil {
			u.From, u.To = *from, *to
		}
		return nil
	})
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == "57014":
		return u, fmt.Errorf("reading its changes took longer than %v, the bound of reset's peek: %w", timeout, err)
	case err != nil:
		return u, fmt.Errorf("peek slot %s: %w", slot, err)
	}
	return u, nil
}

// unpublishedRefusal is Reset's refusal of a slot that holds u, unpublished.
func unpublishedRefusal(slot, publication string, stored cdc.LSN, u Unpublished) error {
	return cdc.Fatalf("slot %s still holds %s, past the router's acknowledged position %s (read with publication %s): `reset` "+
		"would drop them, and for a table whose rows are deleted after insert (Quarkus' outbox does so by default) "+
		"the slot is their only copy. Start the router to publish them first (`status` shows the lag), then stop it "+
		"and reset; or pass --force to drop them (rows still in the table can then be published with `backfill`); "+
		"nothing was changed", slot, u, stored, publication)
}

// errNoPublication: the publication Reset was given does not exist.
var errNoPublication = errors.New("does not exist")

// peekRefusal is Reset's refusal of a slot whose pending changes it could not count.
func peekRefusal(slot string, err error) error {
	msg := err.Error()
	fix := "fix the cause, or pass --force to drop the slot without counting what it holds"
	switch {
	case errors.Is(err, errNoPublication):
		fix = "give reset the --publication (and --shard) the router runs with, or pass --force to drop the slot without counting what it holds"
	case strings.Contains(msg, "publication") && strings.Contains(msg, "does not exist"):
		fix = "the publication was missing at a point of the slot's WAL (dropped and created again), so the changes " +
			"from there on cannot be decoded by anyone: pass --force to drop the slot, then republish the rows still in " +
			"the table (the next run's snapshot, or `backfill`)"
	}
	return cdc.Fatalf("slot %s may hold unpublished events, and reset could not count them (%s): %s; nothing was changed", slot, msg, fix)
}
