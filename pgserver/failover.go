package pgserver

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cdc-router/cdc-router/internal/cdc"
	"github.com/cdc-router/cdc-router/offsets"
)

// FailoverCheck is what --failover-slot needs done before streaming, found before anything is created.
type FailoverCheck struct {
	enable bool     // the slot exists without FAILOVER: ALTER_REPLICATION_SLOT it before streaming
	warn   []string // primary settings that make the standby's copy unsafe or hold the stream back
}

// CheckFailover refuses --failover-slot (wanted) before PostgreSQL 17, finds whether the existing slot needs
// FAILOVER enabled, and checks synchronized_standby_slots, which applies to every failover slot: empty, the
// router may get ahead of the standbys; naming a slot that is missing here, the stream stops.
func CheckFailover(ctx context.Context, sql *pgx.Conn, wanted bool, slot SlotInfo) (FailoverCheck, error) {
	if !wanted && !slot.Failover {
		return FailoverCheck{}, nil
	}
	var num int
	var version, standbySlots string
	err := sql.QueryRow(ctx, `SELECT current_setting('server_version_num')::int, current_setting('server_version'),
		coalesce(current_setting('synchronized_standby_slots', true), '')`).Scan(&num, &version, &standbySlots)
	if err != nil {
		return FailoverCheck{}, fmt.Errorf("read the server version: %w", err)
	}
	if num < 170000 {
		return FailoverCheck{}, cdc.Fatalf("--failover-slot (CDC_ROUTER_FAILOVER_SLOT) needs PostgreSQL 17 or later, where a "+
			"slot can be created with FAILOVER and synchronized to a standby, but this server is PostgreSQL %s: run "+
			"without it, and after a switch to another server re-snapshot as docs/howto/failover.md#what-goes-wrong-without-these-settings describes",
			version)
	}
	c := FailoverCheck{enable: wanted && slot.Exists && !slot.Failover}
	if standbySlots == "" {
		c.warn = append(c.warn, "synchronized_standby_slots is empty on this primary: the router may receive and "+
			"publish changes that no standby has yet, which a failover then takes back from the database although they "+
			"were delivered, and the standby's copy of the slot may lag; set it to the physical slots of the standbys "+
			"that have sync_replication_slots = on (docs/howto/failover.md#each-standby; after a promotion, once this "+
			"server has standbys of its own)")
		return c, nil
	}
	rows, err := sql.Query(ctx, `SELECT n, s.slot_type IS NULL, coalesce(s.slot_type = 'physical' AND s.active, false),
			coalesce(s.wal_status = 'lost', false)
		FROM unnest(string_to_array($1, ',')) AS u(raw), trim(u.raw) AS n
		LEFT JOIN pg_replication_slots s ON s.slot_name = n`, standbySlots)
	if err != nil {
		return c, fmt.Errorf("check synchronized_standby_slots: %w", err)
	}
	type standby struct {
		name               string
		missing, live, bad bool
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (standby, error) {
		var s standby
		return s, r.Scan(&s.name, &s.missing, &s.live, &s.bad)
	})
	if err != nil {
		return c, fmt.Errorf("check synchronized_standby_slots: %w", err)
	}
	for _, s := range list {
		switch {
		case s.missing || s.bad:
			c.warn = append(c.warn, fmt.Sprintf("synchronized_standby_slots names %s, which is %s on this server (a "+
				"promoted standby that kept its old primary's setting?): PostgreSQL holds back every change of a failover "+
				"slot until that standby has it, so the router receives nothing; set synchronized_standby_slots to the "+
				"physical slots of this server's standbys (or '') and reload (SELECT pg_reload_conf())",
				s.name, map[bool]string{true: "missing", false: "invalidated"}[s.missing]))
		case !s.live:
			c.warn = append(c.warn, fmt.Sprintf("no standby streams from physical slot %s, which synchronized_standby_slots "+
				"names: PostgreSQL holds the router's changes back until that standby catches up", s.name))
		}
	}
	return c, nil
}

// Apply enables FAILOVER on the existing slot name over the replication connection conn (ALTER_REPLICATION_SLOT,
// PostgreSQL 17+; the slot must not be streamed, which the caller checked) and logs what the slot is.
func (c FailoverCheck) Apply(ctx context.Context, log *slog.Logger, conn *pgconn.PgConn, name string, slot SlotInfo) error {
	for _, w := range c.warn {
		log.Warn(w)
	}
	if c.enable {
		if _, err := conn.Exec(ctx, "ALTER_REPLICATION_SLOT "+name+" (FAILOVER true)").ReadAll(); err != nil {
			return cdc.Fatalf("PostgreSQL did not enable failover on replication slot %s (%v): run ALTER_REPLICATION_SLOT %s "+
				"(FAILOVER true) on a replication connection as a role with REPLICATION, or drop the slot and re-snapshot "+
				"(`cdc-router reset --slot %s`)", name, err, name, name)
		}
		log.Info("enabled failover on the existing replication slot (--failover-slot): standbys with sync_replication_slots = on now keep a copy of it")
	}
	if slot.Synced {
		log.Info("the replication slot was synchronized from a former primary: continuing from it on this server",
			"lsn", slot.ConfirmedFlush)
	}
	return nil
}

// CheckTimeline logs a timeline change since the position of slot was stored (a promoted standby, or a
// point-in-time recovery, of the same cluster), and refuses a stored position past the point where its
// timeline ended on this server (events on the new timeline would be skipped). It reads the timeline's
// history over the replication connection conn.
func CheckTimeline(ctx context.Context, slot string, log *slog.Logger, conn *pgconn.PgConn,
	store *offsets.Store, sys pglogrepl.IdentifySystemResult) error {
	stored, ok, err := store.Load(ctx)
	if err != nil || !ok || stored.SystemID != sys.SystemID || stored.Timeline == sys.Timeline {
		return err
	}
	var end cdc.LSN
	if stored.Timeline < sys.Timeline && sys.Timeline > 1 {
		hist, err := pglogrepl.TimelineHistory(ctx, conn, sys.Timeline)
		if err != nil {
			return fmt.Errorf("read the history of timeline %d: %w", sys.Timeline, err)
		}
		end = timelineEnd(string(hist.Content), stored.Timeline)
	}
	log.Info("PostgreSQL is on another timeline than when the position was stored (a standby was promoted, or a "+
		"point-in-time recovery): continuing if the slot is on this server", "stored_timeline", stored.Timeline,
		"timeline", sys.Timeline, "stored_timeline_end", end, "lsn", stored.LSN)
	if end != 0 && stored.LSN > end {
		return cdc.Fatalf("the stored position %s of slot %s is past the point %s where timeline %d ended on this server "+
			"(now timeline %d): the events written here on the new timeline after that point would be skipped, so the "+
			"router refuses; to re-snapshot run `cdc-router reset --slot %s` then `cdc-router run`",
			stored.LSN, slot, end, stored.Timeline, sys.Timeline, slot)
	}
	return nil
}

// RecordTimeline stores the server's timeline with the stored position of slot (in the router's schema)
// once the router decided to go on from it on this server, before anything moved: the position is on this
// timeline's history too. The progress inside a transaction stored with it is dropped: that transaction may
// lie past the switch point, where this timeline has other transactions (possibly with the same commit LSN
// and xid).
func RecordTimeline(ctx context.Context, sql *pgx.Conn, schema, slot string, sys pglogrepl.IdentifySystemResult) error {
	table := pgx.Identifier{schema, "positions"}.Sanitize()
	if _, err := sql.Exec(ctx, "UPDATE "+table+" SET timeline = $1, mark_commit_lsn = NULL, mark_xid = NULL, "+
		"mark_done = NULL, mark_config = NULL WHERE slot = $2 AND system_id = $3",
		sys.Timeline, slot, sys.SystemID); err != nil {
		return fmt.Errorf("record timeline %d: %w", sys.Timeline, err)
	}
	return nil
}

// timelineEnd returns the switch point of timeline tli in a timeline history file (lines of
// "<timeline>\t<switch point>\t<reason>"), or 0 when tli is not in it.
func timelineEnd(history string, tli int32) cdc.LSN {
	for _, line := range strings.Split(history, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != strconv.Itoa(int(tli)) {
			continue
		}
		if l, err := cdc.ParseLSN(f[1]); err == nil {
			return l
		}
	}
	return 0
}
