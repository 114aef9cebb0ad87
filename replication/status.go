package replication

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/internal/cdc"
	"github.com/cdc-router/cdc-router/offsets"
	"github.com/cdc-router/cdc-router/snapshot"
)

// Report is what `cdc-router status` shows.
type Report struct {
	Slot           string
	SlotExists     bool
	Active         bool
	ConfirmedFlush cdc.LSN
	LagBytes       int64 // pg_current_wal_lsn() - confirmed_flush_lsn
	WALStatus      string
	Stored         *offsets.Position // nil when none is stored
	Quarantined    int64
	Jobs           []snapshot.Job // the initial snapshot and backfills, finished or not
}

// Status reads the slot, the stored position and the quarantine count over an ordinary connection.
func Status(ctx context.Context, conn *pgx.Conn, slot, schema string) (Report, error) {
	r := Report{Slot: slot}
	info, err := InspectSlot(ctx, conn, slot)
	if err != nil {
		return r, err
	}
	r.SlotExists, r.Active, r.ConfirmedFlush, r.WALStatus = info.Exists, info.Active, info.ConfirmedFlush, info.WALStatus
	if info.Exists && info.ConfirmedFlush != 0 {
		err := conn.QueryRow(ctx, "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::bigint",
			info.ConfirmedFlush.String()).Scan(&r.LagBytes)
		if err != nil {
			return r, fmt.Errorf("read lag: %w", err)
		}
	}
	p, ok, err := offsets.NewStore(conn, schema, slot, 0).Load(ctx)
	if err != nil {
		return r, fmt.Errorf("%w (has `cdc-router migrate` run?)", err)
	}
	if ok {
		r.Stored = &p
	}
	err = conn.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{schema, "quarantine"}.Sanitize()+" WHERE slot = $1",
		slot).Scan(&r.Quarantined)
	if err != nil {
		return r, fmt.Errorf("count quarantine: %w", err)
	}
	if r.Jobs, err = snapshot.NewJobs(conn, schema).All(ctx); err != nil {
		return r, fmt.Errorf("read snapshot progress: %w", err)
	}
	return r, nil
}

// String renders the report for a terminal, one fact per line.
func (r Report) String() string {
	s := fmt.Sprintf("slot:             %s\n", r.Slot)
	if !r.SlotExists {
		s += "slot exists:      no\n"
	} else {
		active := "no (no router is streaming from it)"
		if r.Active {
			active = "yes"
		} else if j := r.initial(); j != nil && !j.Done() {
			active = "no: the initial snapshot is in progress (see below); streaming starts when it is done"
		}
		s += fmt.Sprintf("slot active:      %s\nconfirmed flush:  %s\nlag:              %d bytes\nwal_status:       %s\n",
			active, r.ConfirmedFlush, r.LagBytes, r.WALStatus)
	}
	if r.Stored == nil {
		s += "stored position:  none\n"
	} else {
		s += fmt.Sprintf("stored position:  %s (cluster %s, timeline %d, %s ago)\n", r.Stored.LSN, r.Stored.SystemID,
			r.Stored.Timeline, time.Since(r.Stored.UpdatedAt).Round(time.Second))
	}
	s += fmt.Sprintf("quarantined rows: %d\n", r.Quarantined)
	for _, j := range r.Jobs {
		s += "snapshot:         " + jobLine(j) + "\n"
	}
	return s
}

func (r Report) initial() *snapshot.Job {
	for i := range r.Jobs {
		if r.Jobs[i].Name == snapshot.InitialName(r.Slot) {
			return &r.Jobs[i]
		}
	}
	return nil
}

// jobLine is one snapshot or backfill: state, rows, rate and time left.
func jobLine(j snapshot.Job) string {
	pct := 100.0
	if j.RowsTotal > 0 {
		pct = 100 * float64(j.RowsDone) / float64(j.RowsTotal)
	}
	line := fmt.Sprintf("%s %s, %d/%d rows (%.1f%%)", j.Name, j.State, j.RowsDone, j.RowsTotal, pct)
	if secs := j.UpdatedAt.Sub(j.StartedAt).Seconds(); secs > 0 && j.RowsDone > 0 {
		rate := float64(j.RowsDone) / secs
		line += fmt.Sprintf(", %.0f rows/s", rate)
		if !j.Done() && j.RowsTotal > j.RowsDone {
			line += fmt.Sprintf(", about %v left", time.Duration(float64(j.RowsTotal-j.RowsDone)/rate*float64(time.Second)).Round(time.Second))
		}
	}
	if !j.Done() {
		line += fmt.Sprintf(", last progress %v ago", time.Since(j.UpdatedAt).Round(time.Second))
	}
	return line
}

// Reset forgets the stored position of slot and drops the slot if it exists and is not active, so that
// the next `run` creates a new slot (and, with --snapshot=initial, backfills the table). It is the
// operator's answer to a refusal after a lost slot or a restore.
func Reset(ctx context.Context, conn *pgx.Conn, slot, schema string) error {
	info, err := InspectSlot(ctx, conn, slot)
	if err != nil {
		return err
	}
	if info.Active {
		return fatalf("slot %s is active: stop the router that streams from it before resetting", slot)
	}
	if info.Exists {
		if _, err := conn.Exec(ctx, "SELECT pg_drop_replication_slot($1)", slot); err != nil {
			return fmt.Errorf("drop slot %s: %w", slot, err)
		}
	}
	if err := snapshot.NewJobs(conn, schema).Delete(ctx, snapshot.InitialName(slot)); err != nil {
		return err
	}
	return offsets.NewStore(conn, schema, slot, 0).Delete(ctx)
}
