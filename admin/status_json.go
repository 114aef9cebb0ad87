package admin

import (
	"encoding/json"
	"time"
)

// StatusSchemaVersion is the version of `cdc-router status --json`'s schema (docs/reference.md#status---json). Fields
// are only ever added within a version; a removal or a change of meaning makes a new version.
const StatusSchemaVersion = 1

// statusJSON is the stable JSON form of a Report. Sizes are bytes and durations seconds, as numbers;
// times are RFC 3339 in UTC; LSNs are PostgreSQL's text form (0/16B3748). A fact that is unknown is null.
type statusJSON struct {
	SchemaVersion     int            `json:"schema_version"`
	Slot              string         `json:"slot"`
	Database          string         `json:"database"`
	SlotExists        bool           `json:"slot_exists"`
	SlotDatabase      *string        `json:"slot_database"`
	RouterRunning     bool           `json:"router_running"`
	Active            *bool          `json:"active"`
	ConfirmedFlushLSN *string        `json:"confirmed_flush_lsn"`
	LagBytes          *int64         `json:"lag_bytes"`
	LagSeconds        *float64       `json:"lag_seconds"`
	WALStatus         *string        `json:"wal_status"`
	RetainedWALBytes  *int64         `json:"retained_wal_bytes"`
	SafeWALSizeBytes  *int64         `json:"safe_wal_size_bytes"`
	Failover          *bool          `json:"failover"`
	Synced            *bool          `json:"synced"`
	Invalidation      *string        `json:"invalidation_reason"`
	PendingEvents     *int64         `json:"pending_events"`
	StoredPosition    *storedJSON    `json:"stored_position"`
	Quarantine        quarantineJSON `json:"quarantine"`
	Jobs              []jobJSON      `json:"jobs"`
	PublicationGaps   []gapJSON      `json:"publication_gaps"`
	Publication       string         `json:"publication"`
	Shard             *string        `json:"shard"`
	Shards            []shardJSON    `json:"shards"`
	InFlight          []inFlightJSON `json:"transactions_in_flight"`
	WindowLimit       *int           `json:"window_limit"`    // the live router's in-flight limit at its last heartbeat
	InFlightEvents    *int           `json:"inflight_events"` // its events not yet confirmed then
}

// inFlightJSON is a transaction of the database, open with a transaction ID or prepared, that may still
// write into the slot.
type inFlightJSON struct {
	Kind            string  `json:"kind"` // open or prepared
	XID             string  `json:"xid"`
	PID             *int    `json:"pid"`
	ApplicationName *string `json:"application_name"`
	User            string  `json:"user"`
	State           *string `json:"state"`
	StartedAt       *string `json:"started_at"`
	GID             *string `json:"gid"`
	PreparedAt      *string `json:"prepared_at"`
}

// inFlightJSONOf is ts in the JSON form; nil (null) when they could not be read.
func inFlightJSONOf(ts []InFlight, note string) []inFlightJSON {
	if note != "" {
		return nil
	}
	out := []inFlightJSON{}
	for _, t := range ts {
		j := inFlightJSON{Kind: "open", XID: t.XID, User: t.User}
		if t.Prepared {
			j.Kind, j.GID, j.PreparedAt = "prepared", ptr(t.GID), ptr(rfc3339(t.PreparedAt))
		} else {
			j.PID, j.ApplicationName = ptr(t.PID), ptr(t.Application)
			if t.State != "" {
				j.State = ptr(t.State)
			}
			if t.Started != nil {
				j.StartedAt = ptr(rfc3339(*t.Started))
			}
		}
		out = append(out, j)
	}
	return out
}

// gapJSON is a recorded publication gap whose backfill has not run.
type gapJSON struct {
	Table    string  `json:"table"`
	From     *string `json:"from"`
	To       string  `json:"to"`
	Where    string  `json:"where"`
	Backfill string  `json:"backfill"`
}

// shardJSON is one shard in the report of the unsharded slot: its summary (status --shard has the rest).
type shardJSON struct {
	Shard         string  `json:"shard"`
	Slot          string  `json:"slot"`
	Publication   string  `json:"publication"`
	SlotExists    bool    `json:"slot_exists"`
	RouterRunning bool    `json:"router_running"`
	Active        *bool   `json:"active"`
	LagBytes      *int64  `json:"lag_bytes"`
	PendingEvents *int64  `json:"pending_events"`
	StoredLSN     *string `json:"stored_lsn"`
}

type storedJSON struct {
	LSN       string `json:"lsn"`
	SystemID  string `json:"system_id"`
	Timeline  int32  `json:"timeline"`
	UpdatedAt string `json:"updated_at"`
}

type quarantineJSON struct {
	Total     int64 `json:"total"`
	Handled   int64 `json:"handled"`
	Unhandled int64 `json:"unhandled"`
}

type jobJSON struct {
	Name      string  `json:"name"`
	Kind      string  `json:"kind"`
	State     string  `json:"state"`
	RowsDone  int64   `json:"rows_done"`
	RowsTotal int64   `json:"rows_total"`
	StartedAt string  `json:"started_at"`
	UpdatedAt string  `json:"updated_at"`
	Error     *string `json:"error"`
}

func ptr[T any](v T) *T { return &v }

func rfc3339(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// MarshalJSON writes the report in the documented schema (StatusSchemaVersion).
func (r Report) MarshalJSON() ([]byte, error) {
	j := statusJSON{SchemaVersion: StatusSchemaVersion, Slot: r.Slot, Database: r.Database, SlotExists: r.SlotExists,
		RouterRunning: r.Locked, Jobs: []jobJSON{}, PublicationGaps: []gapJSON{}, Publication: r.Publication, Shards: []shardJSON{},
		Quarantine: quarantineJSON{Total: r.Quarantined, Handled: r.Handled, Unhandled: r.Quarantined - r.Handled},
		InFlight:   inFlightJSONOf(r.InFlight, r.InFlightNote)}
	if r.SlotDatabase != "" {
		j.SlotDatabase = ptr(r.SlotDatabase)
	}
	if r.SlotExists {
		j.Active, j.WALStatus, j.Failover, j.Synced = ptr(r.Active), ptr(r.WALStatus), ptr(r.Failover), ptr(r.Synced)
		if r.Invalidation != "" {
			j.Invalidation = ptr(r.Invalidation)
		}
		if r.Pending != nil && !r.Pending.AtLeast {
			j.PendingEvents = ptr(r.Pending.Events())
		}
		if r.ConfirmedFlush != 0 {
			j.ConfirmedFlushLSN, j.LagBytes, j.RetainedWALBytes = ptr(r.ConfirmedFlush.String()), ptr(r.LagBytes), ptr(r.RetainedBytes)
			j.SafeWALSizeBytes = r.SafeWALBytes
		}
		if r.LagTimeKnown {
			j.LagSeconds = ptr(r.LagTime.Seconds())
		}
	}
	if p := r.Publishing; p != nil {
		j.WindowLimit, j.InFlightEvents = ptr(p.WindowLimit), ptr(p.InFlight)
	}
	if r.Stored != nil {
		j.StoredPosition = &storedJSON{LSN: r.Stored.LSN.String(), SystemID: r.Stored.SystemID, Timeline: r.Stored.Timeline,
			UpdatedAt: rfc3339(r.Stored.UpdatedAt)}
	}
	j.Jobs = jobsJSON(r.Jobs)
	for _, g := range r.Gaps {
		gj := gapJSON{Table: g.Table, To: rfc3339(g.To), Where: g.Where, Backfill: g.Backfill}
		if g.From != nil {
			gj.From = ptr(rfc3339(*g.From))
		}
		j.PublicationGaps = append(j.PublicationGaps, gj)
	}
	if r.Shard != nil {
		j.Shard = ptr(r.Shard.Name())
	}
	for _, sh := range r.Shards {
		sj := shardJSON{Shard: sh.Name(), Slot: sh.Slot, Publication: sh.Publication, SlotExists: sh.Report.SlotExists,
			RouterRunning: sh.Report.Locked}
		if sh.Report.SlotExists {
			sj.Active = ptr(sh.Report.Active)
			if sh.Report.ConfirmedFlush != 0 {
				sj.LagBytes = ptr(sh.Report.LagBytes)
			}
			if p := sh.Report.Pending; p != nil && !p.AtLeast {
				sj.PendingEvents = ptr(p.Events())
			}
		}
		if sh.Report.Stored != nil {
			sj.StoredLSN = ptr(sh.Report.Stored.LSN.String())
		}
		j.Shards = append(j.Shards, sj)
	}
	return json.Marshal(j)
}
