package admin

import (
	"encoding/json"

	"github.com/cdc-router/cdc-router/snapshot"
)

// FleetSchemaVersion is the version of the JSON of `cdc-router status --json` without a slot (FleetReport).
// Fields are only ever added within a version; a removal or a change of meaning makes a new version.
const FleetSchemaVersion = 1

// fleetJSON is the stable JSON form of a FleetReport, in the conventions of statusJSON: sizes in bytes,
// durations in seconds, times RFC 3339 in UTC, an unknown fact null, a list never null.
type fleetJSON struct {
	SchemaVersion      int                 `json:"schema_version"`
	Database           string              `json:"database"`
	Schema             string              `json:"schema"`
	Now                string              `json:"now"` // the database's clock, by which processes are live
	Slots              []fleetSlotJSON     `json:"slots"`
	Backfills          []jobJSON           `json:"backfills"` // unfinished only
	BackfillQuarantine fleetQuarantineJSON `json:"backfill_quarantine"`
	InFlight           []inFlightJSON      `json:"transactions_in_flight"` // null when they could not be read
}

// fleetSlotJSON is one slot. state is the speaking record's role while its process is live, else
// "stopped", "stale" or "no_record". The router's configuration (publication … settings) is the speaking
// record's, null without one.
type fleetSlotJSON struct {
	Slot           string              `json:"slot"`
	SlotExists     bool                `json:"slot_exists"`
	State          string              `json:"state"`
	Active         *bool               `json:"active"`
	LagBytes       *int64              `json:"lag_bytes"`
	WALStatus      *string             `json:"wal_status"`
	Publication    *string             `json:"publication"`
	Tables         []string            `json:"tables"`
	MessagePrefix  *string             `json:"message_prefix"`
	Shard          *string             `json:"shard"`
	Exchange       *string             `json:"exchange"`
	MappedTables   []string            `json:"mapped_tables"`
	Settings       map[string]string   `json:"settings"`
	Quarantine     fleetQuarantineJSON `json:"quarantine"`
	Jobs           []jobJSON           `json:"jobs"` // the slot's unfinished initial snapshots
	Processes      []processJSON       `json:"processes"`
	SettingsDiffer []string            `json:"settings_differ"`
	PendingEvents  *int64              `json:"pending_events"` // counted only for a slot no router runs
	PendingAtLeast bool                `json:"pending_at_least"`
	PendingNote    *string             `json:"pending_note"`
}

type fleetQuarantineJSON struct {
	Open  int64 `json:"open"` // not handled
	Total int64 `json:"total"`
}

// processJSON is one router record.
type processJSON struct {
	Instance            string   `json:"instance"`
	Host                string   `json:"host"`
	PID                 int      `json:"pid"`
	Role                string   `json:"role"` // as last recorded; "stopped" once it stopped
	Live                bool     `json:"live"`
	Version             *string  `json:"version"`
	StartedAt           *string  `json:"started_at"`
	HeartbeatAt         *string  `json:"heartbeat_at"`
	HeartbeatAgeSeconds *float64 `json:"heartbeat_age_seconds"`
	StoppedAt           *string  `json:"stopped_at"`
	LastError           *string  `json:"last_error"`
	WindowLimit         *int     `json:"window_limit"`    // the in-flight limit at its last heartbeat; null while it does not publish
	InFlightEvents      *int     `json:"inflight_events"` // its events not yet confirmed then
}

// MarshalJSON writes the fleet in the documented schema (FleetSchemaVersion).
func (f FleetReport) MarshalJSON() ([]byte, error) {
	j := fleetJSON{SchemaVersion: FleetSchemaVersion, Database: f.Database, Schema: f.Schema, Now: rfc3339(f.Now),
		Slots: []fleetSlotJSON{}, Backfills: jobsJSON(f.Backfills),
		BackfillQuarantine: fleetQuarantineJSON{Open: f.BackfillQuarantine.Open, Total: f.BackfillQuarantine.Total},
		InFlight:           inFlightJSONOf(f.InFlight, f.InFlightNote)}
	for _, sl := range f.Slots {
		sj := fleetSlotJSON{Slot: sl.Slot, SlotExists: sl.Exists, State: sl.State(f.Now), Tables: []string{},
			MappedTables: []string{}, Jobs: jobsJSON(sl.Jobs), Processes: []processJSON{}, SettingsDiffer: []string{},
			Quarantine: fleetQuarantineJSON{Open: sl.Quarantine.Open, Total: sl.Quarantine.Total}}
		if sl.Exists {
			sj.Active, sj.LagBytes, sj.WALStatus = ptr(sl.Active), sl.LagBytes, ptr(sl.WALStatus)
		}
		if r := sl.Speaker; r != nil {
			sj.Publication, sj.MessagePrefix, sj.Shard, sj.Exchange = ptr(r.Publication), ptr(r.MessagePrefix), ptr(r.Shard), ptr(r.Exchange)
			sj.Tables = append(sj.Tables, r.Tables...)
			sj.MappedTables = append(sj.MappedTables, mappedTables(*r)...)
			sj.Settings = r.Settings
			if sj.Settings == nil {
				sj.Settings = map[string]string{}
			}
		}
		sj.SettingsDiffer = append(sj.SettingsDiffer, sl.SettingsDiffer...)
		if sl.Pending != nil {
			sj.PendingEvents, sj.PendingAtLeast = ptr(sl.Pending.Events()), sl.Pending.AtLeast
		}
		if sl.PendingNote != "" {
			sj.PendingNote = ptr(sl.PendingNote)
		}
		for _, p := range sl.Records {
			pj := processJSON{Instance: p.Instance, Host: p.Host, PID: p.PID, Role: p.Role, Live: p.Live(f.Now)}
			if p.Version != "" {
				pj.Version = ptr(p.Version)
			}
			if !p.StartedAt.IsZero() {
				pj.StartedAt = ptr(rfc3339(p.StartedAt))
			}
			if !p.HeartbeatAt.IsZero() {
				pj.HeartbeatAt, pj.HeartbeatAgeSeconds = ptr(rfc3339(p.HeartbeatAt)), ptr(f.Now.Sub(p.HeartbeatAt).Seconds())
			}
			if p.StoppedAt != nil {
				pj.StoppedAt = ptr(rfc3339(*p.StoppedAt))
			}
			if p.LastError != "" {
				pj.LastError = ptr(p.LastError)
			}
			if pub := p.Publishing; pub != nil && p.Live(f.Now) {
				pj.WindowLimit, pj.InFlightEvents = ptr(pub.WindowLimit), ptr(pub.InFlight)
			}
			sj.Processes = append(sj.Processes, pj)
		}
		j.Slots = append(j.Slots, sj)
	}
	return json.Marshal(j)
}

// jobsJSON is jobs in the form of status --json's jobs, never null.
func jobsJSON(jobs []snapshot.Job) []jobJSON {
	out := []jobJSON{}
	for _, job := range jobs {
		jj := jobJSON{Name: job.Name, Kind: job.Kind, State: jobState(job), RowsDone: job.RowsDone, RowsTotal: job.RowsTotal,
			StartedAt: rfc3339(job.StartedAt), UpdatedAt: rfc3339(job.UpdatedAt)}
		if job.Error != "" {
			jj.Error = ptr(job.Error)
		}
		out = append(out, jj)
	}
	return out
}
