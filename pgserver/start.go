package pgserver

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cdc-router/cdc-router/internal/cdc"
	"github.com/cdc-router/cdc-router/offsets"
)

// StartDecision is what the router does with its slot at start.
type StartDecision struct {
	Create bool    // the slot is missing and no position was ever stored: create it
	Start  cdc.LSN // START_REPLICATION position when not creating
}

// StartRules are the router's settings that DecideStart's refusals depend on and name.
type StartRules struct {
	Slot         string // the slot's name (--slot)
	FailoverSlot bool   // --failover-slot: the slot is meant to survive a promotion
}

// StartPlan is what the slot and the stored position say about a stream's start, read before anything is
// created or published.
type StartPlan struct {
	Decision StartDecision
	Slot     SlotInfo      // the slot as found
	Failover FailoverCheck // what --failover-slot needs done
	Timeline bool          // the stored position is of an earlier timeline of this cluster: record this one
	// Stored is the stored position as loaded (HasStored: there is one), for the progress inside a
	// transaction it records.
	Stored    offsets.Position
	HasStored bool
}

// PlanStart reads the stored position and the slot, refuses a slot another process streams from (BusyError),
// checks what --failover-slot needs, and applies DecideStart. unfinished, asked only when the slot is missing
// and a position is stored, describes the slot's unfinished initial snapshot ("" when there is none).
func PlanStart(ctx context.Context, sql *pgx.Conn, store *offsets.Store, cfg StartRules, sys pglogrepl.IdentifySystemResult,
	unfinished func(context.Context) (string, error)) (StartPlan, error) {
	stored, hasStored, err := store.Load(ctx)
	if err != nil {
		return StartPlan{}, err
	}
	slot, err := InspectSlot(ctx, sql, cfg.Slot)
	if err != nil {
		return StartPlan{}, err
	}
	if slot.Active {
		// Checked before the broker is dialled, so that a standby waiting for a dead router's walsender stays
		// quiet; one that becomes active after this check meets 55006 at START_REPLICATION.
		return StartPlan{}, BusyError(cfg.Slot)
	}
	fc, err := CheckFailover(ctx, sql, cfg.FailoverSlot, slot)
	if err != nil {
		return StartPlan{}, err
	}
	var snapshot string
	if !slot.Exists && hasStored {
		if snapshot, err = unfinished(ctx); err != nil {
			return StartPlan{}, err
		}
	}
	d, err := DecideStart(cfg, sys, slot, stored, hasStored, snapshot)
	if err != nil {
		return StartPlan{}, err
	}
	return StartPlan{Decision: d, Slot: slot, Failover: fc, Timeline: hasStored && stored.Timeline != sys.Timeline,
		Stored: stored, HasStored: hasStored}, nil
}

// Prepare does on the server what the plan needs before slot is streamed from: FAILOVER enabled on it when
// --failover-slot wants it (on conn, the replication connection, called by the stream's goroutine before
// START_REPLICATION), and this timeline recorded with the stored position in schema when that position is of
// an earlier one.
func (p StartPlan) Prepare(ctx context.Context, log *slog.Logger, conn *pgconn.PgConn, sql *pgx.Conn, schema, slot string,
	sys pglogrepl.IdentifySystemResult) error {
	if err := p.Failover.Apply(ctx, log, conn, slot, p.Slot); err != nil {
		return err
	}
	if p.Timeline {
		return RecordTimeline(ctx, sql, schema, slot, sys)
	}
	return nil
}

// DecideStart applies the refusal rules: a stored position is only trusted on the cluster that stored it,
// and a slot that vanished or lost WAL behind a stored position means events may be gone. unfinished
// describes the slot's initial snapshot when one is recorded and not done ("" otherwise), for the refusal.
func DecideStart(cfg StartRules, sys pglogrepl.IdentifySystemResult, slot SlotInfo, stored offsets.Position, hasStored bool,
	unfinished string) (StartDecision, error) {
	reset := fmt.Sprintf("`cdc-router reset --slot %s` then `cdc-router run` (which re-snapshots the outbox table)", cfg.Slot)
	if hasStored && stored.SystemID != sys.SystemID {
		return StartDecision{}, cdc.Fatalf("the stored position %s of slot %s was written by PostgreSQL cluster %s, but this "+
			"is cluster %s (a restore or a switch to another server): starting from it could skip events, so the router "+
			"refuses; to start over on this cluster run %s", stored.LSN, cfg.Slot, stored.SystemID, sys.SystemID, reset)
	}
	if !slot.Exists {
		if hasStored {
			return StartDecision{}, cdc.Fatalf("replication slot %s does not exist but a position (%s) is stored for it: the "+
				"slot was dropped and the events written since then may be gone from WAL, so the router refuses to create "+
				"a new slot and skip them; to re-snapshot run %s%s", cfg.Slot, stored.LSN, reset, promotedHint(cfg, sys, stored, unfinished))
		}
		return StartDecision{Create: true}, nil
	}
	if slot.Database != "" && sys.DBName != "" && slot.Database != sys.DBName {
		return StartDecision{}, cdc.Fatalf("replication slot %s belongs to database %s, not %s: point --pg-url at %s or "+
			"choose another --slot", cfg.Slot, slot.Database, sys.DBName, slot.Database)
	}
	if slot.WALStatus == "lost" || slot.Invalidation != "" {
		return StartDecision{}, cdc.Fatalf("replication slot %s is invalidated (%s): PostgreSQL will not decode from it "+
			"again, so events were lost from it; to re-snapshot run %s", cfg.Slot, slot.InvalidationCause(), reset)
	}
	if slot.Plugin != "pgoutput" {
		return StartDecision{}, cdc.Fatalf("replication slot %s uses plugin %q, not pgoutput: drop it "+
			"(SELECT pg_drop_replication_slot('%s')) or choose another --slot", cfg.Slot, slot.Plugin, cfg.Slot)
	}
	start := slot.ConfirmedFlush
	if hasStored && stored.LSN > start {
		// The slot's position is persisted only at checkpoints; after a PostgreSQL crash it can be behind the
		// position the broker confirmed. Starting from the stored one avoids republishing confirmed events.
		start = stored.LSN
	}
	return StartDecision{Start: start}, nil
}

// promotedHint adds to the slot-lost refusal, when the position was stored on an earlier timeline of this
// cluster (a promoted standby), why the slot is missing and how to keep it through the next failover.
func promotedHint(cfg StartRules, sys pglogrepl.IdentifySystemResult, stored offsets.Position, unfinished string) string {
	if stored.Timeline == 0 || stored.Timeline == sys.Timeline {
		return ""
	}
	if unfinished != "" {
		// PostgreSQL 17's slot synchronization persists a standby's copy only once the primary's slot has
		// advanced past the standby's own horizon (restart_lsn, catalog_xmin), which a new slot does only by
		// streaming; during the initial snapshot it does not stream.
		return fmt.Sprintf(". This server was promoted (timeline %d, the position is of timeline %d) while the slot's initial "+
			"snapshot was unfinished (%s): a standby keeps a synchronized copy of a failover slot only once the slot has "+
			"streamed past the standby's position, which a slot does after its initial snapshot, so no standby had it. "+
			"Nothing was published from the stream yet; reset and run copy the table again in a new slot's snapshot on "+
			"this server: rows already published come again, and rows deleted from the table since the old slot was "+
			"created (an outbox that deletes after insert) are not in it (docs/howto/failover.md#a-promotion-during-the-initial-snapshot)",
			sys.Timeline, stored.Timeline, unfinished)
	}
	if cfg.FailoverSlot {
		return fmt.Sprintf(". This server was promoted (timeline %d, the position is of timeline %d) without a "+
			"synchronized copy of the slot: check sync_replication_slots = on, hot_standby_feedback = on and a "+
			"primary_conninfo with dbname on the standbys, and synchronized_standby_slots on the primary "+
			"(docs/howto/failover.md#what-goes-wrong-without-these-settings)", sys.Timeline, stored.Timeline)
	}
	return fmt.Sprintf(". This server was promoted (timeline %d, the position is of timeline %d) and the slot was "+
		"not kept: on PostgreSQL 17+ run the router with --failover-slot and standbys with sync_replication_slots = on "+
		"so that the next promotion keeps it (docs/howto/failover.md#the-router)", sys.Timeline, stored.Timeline)
}
