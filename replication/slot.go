package replication

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cdc-router/cdc-router/internal/cdc"
	"github.com/cdc-router/cdc-router/offsets"
)

// SlotInfo is what pg_replication_slots says about the router's slot.
type SlotInfo struct {
	Exists         bool
	Plugin         string
	Database       string
	Active         bool
	ConfirmedFlush cdc.LSN
	WALStatus      string // reserved, extended, unreserved, lost; empty when unknown
	Failover       bool   // created or altered with FAILOVER (PostgreSQL 17+; false before)
	Synced         bool   // synchronized from a primary by a standby's slot sync (PostgreSQL 17+); kept after a promotion
	// Invalidation is why PostgreSQL invalidated the slot (invalidation_reason, PostgreSQL 17+: wal_removed,
	// rows_removed, wal_level_insufficient, idle_timeout); empty when it is valid or the server is older.
	Invalidation string
}

// InspectSlot reads the slot's row from pg_replication_slots.
func InspectSlot(ctx context.Context, conn *pgx.Conn, slot string) (SlotInfo, error) {
	var s SlotInfo
	var flush, walStatus, plugin, database, invalidation *string
	var failover, synced *bool
	// to_jsonb reads the columns of PostgreSQL 17+ (invalidation_reason, failover, synced) where they exist and
	// NULL before, so that one query serves every version.
	err := conn.QueryRow(ctx, `SELECT plugin, database, active, confirmed_flush_lsn::text, wal_status,
			to_jsonb(s) ->> 'invalidation_reason', (to_jsonb(s) ->> 'failover')::bool, (to_jsonb(s) ->> 'synced')::bool
		FROM pg_replication_slots s WHERE slot_name = $1`, slot).Scan(&plugin, &database, &s.Active, &flush, &walStatus,
		&invalidation, &failover, &synced)
	if errors.Is(err, pgx.ErrNoRows) {
		return s, nil
	}
	if err != nil {
		return s, fmt.Errorf("inspect slot %s: %w", slot, err)
	}
	s.Exists = true
	s.Plugin, s.Database, s.WALStatus, s.Invalidation = deref(plugin), deref(database), deref(walStatus), deref(invalidation)
	s.Failover, s.Synced = failover != nil && *failover, synced != nil && *synced
	if flush != nil {
		if s.ConfirmedFlush, err = cdc.ParseLSN(*flush); err != nil {
			return s, err
		}
	}
	return s, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// startDecision is what the router does with the slot at start.
type startDecision struct {
	create bool    // the slot is missing and no position was ever stored: create it
	start  cdc.LSN // START_REPLICATION position when not creating
}

// decideStart applies the refusal rules: a stored position is only trusted on the cluster that stored it,
// and a slot that vanished or lost WAL behind a stored position means events may be gone.
func decideStart(cfg Config, sys pglogrepl.IdentifySystemResult, slot SlotInfo, stored offsets.Position, hasStored bool) (startDecision, error) {
	reset := fmt.Sprintf("`cdc-router reset --slot %s` then `cdc-router run` (which re-snapshots the outbox table)", cfg.Slot)
	if hasStored && stored.SystemID != sys.SystemID {
		return startDecision{}, fatalf("the stored position %s of slot %s was written by PostgreSQL cluster %s, but this "+
			"is cluster %s (a restore or a switch to another server): starting from it could skip events, so the router "+
			"refuses; to start over on this cluster run %s", stored.LSN, cfg.Slot, stored.SystemID, sys.SystemID, reset)
	}
	if !slot.Exists {
		if hasStored {
			return startDecision{}, fatalf("replication slot %s does not exist but a position (%s) is stored for it: the "+
				"slot was dropped and the events written since then may be gone from WAL, so the router refuses to create "+
				"a new slot and skip them; to re-snapshot run %s%s", cfg.Slot, stored.LSN, reset, promotedHint(cfg, sys, stored))
		}
		return startDecision{create: true}, nil
	}
	if slot.Database != "" && sys.DBName != "" && slot.Database != sys.DBName {
		return startDecision{}, fatalf("replication slot %s belongs to database %s, not %s: point --pg-url at %s or "+
			"choose another --slot", cfg.Slot, slot.Database, sys.DBName, slot.Database)
	}
	if slot.WALStatus == "lost" || slot.Invalidation != "" {
		return startDecision{}, fatalf("replication slot %s is invalidated (%s): PostgreSQL will not decode from it "+
			"again, so events were lost from it; to re-snapshot run %s", cfg.Slot, invalidationCause(slot), reset)
	}
	if slot.Plugin != "pgoutput" {
		return startDecision{}, fatalf("replication slot %s uses plugin %q, not pgoutput: drop it "+
			"(SELECT pg_drop_replication_slot('%s')) or choose another --slot", cfg.Slot, slot.Plugin, cfg.Slot)
	}
	start := slot.ConfirmedFlush
	if hasStored && stored.LSN > start {
		// The slot's position is persisted only at checkpoints; after a PostgreSQL crash it can be behind the
		// position the broker confirmed. Starting from the stored one avoids republishing confirmed events.
		start = stored.LSN
	}
	return startDecision{start: start}, nil
}

// promotedHint adds to the slot-lost refusal, when the position was stored on an earlier timeline of this
// cluster (a promoted standby), how to keep the slot through the next failover.
func promotedHint(cfg Config, sys pglogrepl.IdentifySystemResult, stored offsets.Position) string {
	if stored.Timeline == 0 || stored.Timeline == sys.Timeline {
		return ""
	}
	if cfg.FailoverSlot {
		return fmt.Sprintf(". This server was promoted (timeline %d, the position is of timeline %d) without a "+
			"synchronized copy of the slot: check sync_replication_slots = on, hot_standby_feedback = on and a "+
			"primary_conninfo with dbname on the standbys, and synchronized_standby_slots on the primary "+
			"(docs/operations.md, Failover slots)", sys.Timeline, stored.Timeline)
	}
	return fmt.Sprintf(". This server was promoted (timeline %d, the position is of timeline %d) and the slot was "+
		"not kept: on PostgreSQL 17+ run the router with --failover-slot and standbys with sync_replication_slots = on "+
		"so that the next promotion keeps it (docs/operations.md, Failover slots)", sys.Timeline, stored.Timeline)
}

// invalidationCause names why the slot was invalidated and the setting behind it, in PostgreSQL's words.
func invalidationCause(slot SlotInfo) string {
	switch slot.Invalidation {
	case "idle_timeout":
		return "invalidation_reason idle_timeout: it stayed inactive longer than idle_replication_slot_timeout; " +
			"raise that setting (or set it to 0) to cover the longest the router may be stopped"
	case "rows_removed":
		return "invalidation_reason rows_removed: a standby's slot conflicted with recovery; set hot_standby_feedback = on " +
			"with a physical slot for the standby"
	case "wal_level_insufficient":
		return "invalidation_reason wal_level_insufficient: wal_level was lowered below logical; set wal_level = logical"
	case "wal_removed", "":
		return "wal_status lost: the WAL it needed was removed, max_slot_wal_keep_size exceeded?"
	}
	return "invalidation_reason " + slot.Invalidation
}

// createSlot creates the permanent pgoutput slot, with FAILOVER when failover is set, and returns its
// consistent point.
func createSlot(ctx context.Context, conn *pgconn.PgConn, slot string, failover bool) (cdc.LSN, error) {
	res, err := pglogrepl.CreateReplicationSlot(ctx, conn, slot, "pgoutput", slotOptions(false, failover))
	if err != nil {
		return 0, createError(slot, err)
	}
	return cdc.ParseLSN(res.ConsistentPoint)
}

// createError turns a failed CREATE_REPLICATION_SLOT into one sentence that names the fix where the
// cause is the server's configuration, which retrying cannot change.
func createError(slot string, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "53400" {
		return fatalf("PostgreSQL cannot create replication slot %s: %s; drop slots nobody uses (SELECT slot_name, "+
			"active FROM pg_replication_slots; SELECT pg_drop_replication_slot('<name>')) or raise max_replication_slots "+
			"(ALTER SYSTEM SET max_replication_slots = ..., then restart PostgreSQL)", slot, pgErr.Message)
	}
	return fmt.Errorf("create replication slot %s: %w", slot, err)
}
