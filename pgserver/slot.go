package pgserver

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cdc-router/cdc-router/internal/cdc"
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

// InvalidationCause names why the slot was invalidated and the setting behind it, in PostgreSQL's words.
func (slot SlotInfo) InvalidationCause() string {
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

// CreateSlot creates the permanent pgoutput slot on the replication connection conn, with FAILOVER when
// failover is set, and returns its consistent point.
func CreateSlot(ctx context.Context, conn *pgconn.PgConn, slot string, failover bool) (cdc.LSN, error) {
	res, err := pglogrepl.CreateReplicationSlot(ctx, conn, slot, "pgoutput", slotOptions(false, failover))
	if err != nil {
		return 0, createError(slot, err)
	}
	return cdc.ParseLSN(res.ConsistentPoint)
}

// CreateSlotWithSnapshot is CreateSlot exporting the slot's snapshot, whose name it returns with the
// consistent point: the snapshot lives until conn runs its next command, so the caller imports it
// (SET TRANSACTION SNAPSHOT) on another connection before it uses conn again.
func CreateSlotWithSnapshot(ctx context.Context, conn *pgconn.PgConn, slot string, failover bool) (cdc.LSN, string, error) {
	res, err := pglogrepl.CreateReplicationSlot(ctx, conn, slot, "pgoutput", slotOptions(true, failover))
	if err != nil {
		return 0, "", createError(slot, err)
	}
	point, err := cdc.ParseLSN(res.ConsistentPoint)
	return point, res.SnapshotName, err
}

// createError turns a failed CREATE_REPLICATION_SLOT into one sentence that names the fix where the
// cause is the server's configuration, which retrying cannot change.
func createError(slot string, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "53400" {
		return cdc.Fatalf("PostgreSQL cannot create replication slot %s: %s; drop slots nobody uses (SELECT slot_name, "+
			"active FROM pg_replication_slots; SELECT pg_drop_replication_slot('<name>')) or raise max_replication_slots "+
			"(ALTER SYSTEM SET max_replication_slots = ..., then restart PostgreSQL)", slot, pgErr.Message)
	}
	return fmt.Errorf("create replication slot %s: %w", slot, err)
}
