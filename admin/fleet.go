package admin

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/registry"
	"github.com/cdc-router/cdc-router/snapshot"
)

// FleetReport is what `cdc-router status` without a slot shows: every pgoutput slot of the connection's
// database with the records its routers keep in the router schema (package registry), and the records
// whose slot no longer exists.
type FleetReport struct {
	Database string
	Schema   string
	Now      time.Time   // the database's clock, by which the records are judged live (registry.Record.Live)
	Slots    []FleetSlot // by name: the slots of this database, and the recorded slots that do not exist
	// Backfills are this database's unfinished backfills (running, interrupted or failed): not tied to a slot.
	Backfills          []snapshot.Job
	BackfillQuarantine QuarantineCount // the quarantine records of backfills
	// InFlight are the database's transactions that may still write into its slots (read by
	// CountPendingOfStopped), InFlightNote why they could not be read.
	InFlight     []InFlight
	InFlightNote string
}

// FleetSlot is one slot of the fleet view: the slot as PostgreSQL has it and the records that name it.
type FleetSlot struct {
	Slot      string
	Exists    bool   // a pgoutput slot of this name exists in this database; false: only records name it
	Active    bool   // a walsender streams it
	LagBytes  *int64 // pg_current_wal_lsn() - confirmed_flush_lsn; nil while the slot has none
	WALStatus string
	// Records are the slot's records, the one that speaks for the slot (registry.Speaker) first, then newest
	// first; Speaker is that one, nil without records.
	Records    []registry.Record
	Speaker    *registry.Record
	Quarantine QuarantineCount
	Jobs       []snapshot.Job // the slot's unfinished initial snapshots
	// SettingsDiffer are the keys of the effective configuration in which the slot's live processes differ.
	SettingsDiffer []string
	// Pending is what waits in a slot no router runs, counted by CountPendingOfStopped (nil when not
	// counted, with PendingNote saying why when a count was tried or could not be).
	Pending     *Unpublished
	PendingNote string
}

// QuarantineCount is how many quarantine records there are, and how many of them no one handled yet.
type QuarantineCount struct{ Open, Total int64 }

// Slot states of FleetSlot.State besides the roles of package metrics.
const (
	FleetStopped  = "stopped"   // the record that speaks for the slot says its process stopped
	FleetStale    = "stale"     // its process was not heard from within registry.Stale
	FleetNoRecord = "no_record" // no cdc-router recorded the slot: an older router, or another tool
)

// State is the speaker's role while its process is live, else FleetStopped, FleetStale or FleetNoRecord.
func (s FleetSlot) State(now time.Time) string {
	switch r := s.Speaker; {
	case r == nil:
		return FleetNoRecord
	case r.Live(now):
		return r.Role
	case r.StoppedAt != nil:
		return FleetStopped
	}
	return FleetStale
}

// Fleet reads every pgoutput slot of the connection's database, the records of schema's routers table,
// the quarantine counts by slot and the unfinished snapshot jobs, over an ordinary connection.
func Fleet(ctx context.Context, conn *pgx.Conn, schema string) (FleetReport, error) {
	f := FleetReport{Schema: schema}
	if err := conn.QueryRow(ctx, "SELECT current_database(), now()").Scan(&f.Database, &f.Now); err != nil {
		return f, fmt.Errorf("read the database name: %w", err)
	}
	slots, err := readSlots(ctx, conn)
	if err != nil {
		return f, err
	}
	recs, err := registry.List(ctx, conn, schema)
	if err != nil {
		return f, err
	}
	for _, r := range recs {
		if slots[r.Slot] == nil {
			slots[r.Slot] = &FleetSlot{Slot: r.Slot}
		}
		slots[r.Slot].Records = append(slots[r.Slot].Records, r)
	}
	for _, s := range slots {
		if r, ok := registry.Speaker(s.Records, s.Slot, f.Now); ok {
			s.Speaker = &r
			i := slices.IndexFunc(s.Records, func(o registry.Record) bool { return o.Instance == r.Instance })
			s.Records = append(append([]registry.Record{r}, s.Records[:i]...), s.Records[i+1:]...)
		}
		s.SettingsDiffer = settingsDiffer(s.Records, f.Now)
	}
	if err := f.readQuarantine(ctx, conn, slots); err != nil {
		return f, err
	}
	if err := f.readJobs(ctx, conn, slots); err != nil {
		return f, err
	}
	for _, name := range slices.Sorted(maps.Keys(slots)) {
		f.Slots = append(f.Slots, *slots[name])
	}
	return f, nil
}

// readSlots reads the pgoutput slots of the connection's database by name.
func readSlots(ctx context.Context, conn *pgx.Conn) (map[string]*FleetSlot, error) {
	rows, err := conn.Query(ctx, `SELECT slot_name, active, coalesce(wal_status, ''),
		pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn)::bigint
		FROM pg_replication_slots WHERE database = current_database() AND plugin = 'pgoutput'`)
	if err != nil {
		return nil, fmt.Errorf("read the replication slots: %w", err)
	}
	defer rows.Close()
	slots := map[string]*FleetSlot{}
	for rows.Next() {
		s := FleetSlot{Exists: true}
		if err := rows.Scan(&s.Slot, &s.Active, &s.WALStatus, &s.LagBytes); err != nil {
			return nil, fmt.Errorf("read the replication slots: %w", err)
		}
		slots[s.Slot] = &s
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the replication slots: %w", err)
	}
	return slots, nil
}

// readQuarantine counts the quarantine records by slot, the backfills' together.
func (f *FleetReport) readQuarantine(ctx context.Context, conn *pgx.Conn, slots map[string]*FleetSlot) error {
	rows, err := conn.Query(ctx, `SELECT slot, count(*) FILTER (WHERE handled_at IS NULL), count(*) FROM `+
		pgx.Identifier{f.Schema, "quarantine"}.Sanitize()+` GROUP BY slot`)
	if err != nil {
		return fmt.Errorf("count quarantine (has `cdc-router migrate` run?): %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var slot string
		var n QuarantineCount
		if err := rows.Scan(&slot, &n.Open, &n.Total); err != nil {
			return fmt.Errorf("count quarantine: %w", err)
		}
		switch {
		case strings.HasPrefix(slot, "backfill:"):
			f.BackfillQuarantine.Open += n.Open
			f.BackfillQuarantine.Total += n.Total
		case slots[slot] != nil:
			slots[slot].Quarantine = n
		}
	}
	return rows.Err()
}

// readJobs files the unfinished jobs: each initial snapshot under its slot, the backfills apart.
func (f *FleetReport) readJobs(ctx context.Context, conn *pgx.Conn, slots map[string]*FleetSlot) error {
	all, err := snapshot.NewJobs(conn, f.Schema).All(ctx)
	if err != nil {
		return fmt.Errorf("read snapshot progress: %w", err)
	}
	for _, j := range all {
		if j.Done() {
			continue
		}
		if j.Kind == "backfill" {
			f.Backfills = append(f.Backfills, j)
			continue
		}
		for _, s := range slots {
			if snapshot.IsInitialOf(j.Name, s.Slot) {
				s.Jobs = append(s.Jobs, j)
			}
		}
	}
	return nil
}

// settingsDiffer are the keys whose values are not the same in every live record (a key one lacks differs).
func settingsDiffer(recs []registry.Record, now time.Time) []string {
	var live []registry.Record
	keys := map[string]bool{}
	for _, r := range recs {
		if r.Live(now) {
			live = append(live, r)
			for k := range r.Settings {
				keys[k] = true
			}
		}
	}
	var differ []string
	for k := range keys {
		for _, r := range live[1:] {
			v, ok := r.Settings[k]
			v0, ok0 := live[0].Settings[k]
			if v != v0 || ok != ok0 {
				differ = append(differ, k)
				break
			}
		}
	}
	sort.Strings(differ)
	return differ
}
