package admin

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/cdc-router/cdc-router/registry"
)

// String renders the fleet for a terminal: the database, then each slot as a block of one fact per line.
func (f FleetReport) String() string {
	s := fmt.Sprintf("database:         %s (router schema %s): %s\n", f.Database, f.Schema, plural(len(f.Slots), "slot"))
	if len(f.Slots) == 0 {
		s += "                  no pgoutput slot and no router record: no cdc-router has run here yet\n"
	}
	for _, sl := range f.Slots {
		s += "\n" + sl.text(f)
	}
	if len(f.Backfills) > 0 || f.BackfillQuarantine.Total > 0 {
		s += "\n"
	}
	for _, j := range f.Backfills {
		s += "backfill:         " + jobLine(j) + "\n"
	}
	if q := f.BackfillQuarantine; q.Total > 0 {
		s += fmt.Sprintf("backfills' quarantined rows: %d not handled (%d in all)\n", q.Open, q.Total)
	}
	if line := (Report{InFlight: f.InFlight, InFlightNote: f.InFlightNote}).inFlightLine(); line != "" {
		s += "\n" + strings.Replace(line, "the slot", "the slots", 1)
	}
	return s
}

// text is one slot's block.
func (sl FleetSlot) text(f FleetReport) string {
	now := f.Now
	s := fmt.Sprintf("slot:             %s\n", sl.Slot)
	if !sl.Exists {
		s += "slot exists:      no: this database has no pgoutput slot of that name (dropped, or reset); only the " +
			"router records below name it\n"
	}
	r := sl.Speaker
	switch state := sl.State(now); state {
	case FleetNoRecord:
		s += "router:           no record: no cdc-router recorded this slot (a router older than this version, or another tool)\n"
	case FleetStopped:
		s += fmt.Sprintf("router:           stopped at %s\n", rfc3339(*r.StoppedAt))
	case FleetStale:
		s += fmt.Sprintf("router:           not heard from since %s (%s ago): it was killed, or cannot reach the database\n",
			rfc3339(r.HeartbeatAt), HumanDuration(now.Sub(r.HeartbeatAt)))
	default:
		s += "router:           " + state + "\n"
	}
	for i, p := range sl.Records {
		label := "processes:        "
		if i > 0 {
			label = "                  "
		}
		s += label + processLine(p, now) + "\n"
	}
	if r != nil {
		s += fmt.Sprintf("publication:      %s\ntables:           %s\nmessage prefix:   %s\nshard:            %s\n"+
			"exchange:         %s\nmapped tables:    %s\n", r.Publication, OrDash(strings.Join(r.Tables, ", ")),
			OrDash(r.MessagePrefix), OrDash(r.Shard), OrDash(r.Exchange), OrDash(strings.Join(mappedTables(*r), ", ")))
	}
	if sl.Exists {
		active := "no (no router is streaming from it)"
		if sl.Active {
			active = "yes"
		}
		lag := "unknown: the slot has no confirmed position yet"
		if sl.LagBytes != nil {
			lag = fmt.Sprintf("%s (%d bytes)", HumanBytes(*sl.LagBytes), *sl.LagBytes)
		}
		s += fmt.Sprintf("slot active:      %s\nlag:              %s\nwal_status:       %s\n", active, lag, OrDash(sl.WALStatus))
	}
	s += sl.pendingText(f)
	s += fmt.Sprintf("quarantined rows: %d not handled (%d in all)\n", sl.Quarantine.Open, sl.Quarantine.Total)
	for _, j := range sl.Jobs {
		s += "snapshot:         " + jobLine(j) + "\n"
	}
	if len(sl.SettingsDiffer) > 0 {
		s += "settings differ:  the live processes of this slot run with different " + strings.Join(sl.SettingsDiffer, ", ") +
			": the standby that takes over will not run as the active one does\n"
	}
	return s
}

// processLine is one router process: where it runs, its state and when it was last heard from.
func processLine(p registry.Record, now time.Time) string {
	line := fmt.Sprintf("%s pid %d, ", OrDash(p.Host), p.PID)
	switch {
	case p.Live(now):
		line += fmt.Sprintf("%s, heard %s ago", p.Role, HumanDuration(now.Sub(p.HeartbeatAt)))
		if pub := p.Publishing; pub != nil {
			line += fmt.Sprintf(", %d events unconfirmed of an in-flight limit of %d", pub.InFlight, pub.WindowLimit)
		}
	case p.StoppedAt != nil:
		line += "stopped at " + rfc3339(*p.StoppedAt)
	case p.HeartbeatAt.IsZero():
		line += "never heard from"
	default:
		line += fmt.Sprintf("%s when last heard from, %s (%s ago)", p.Role, rfc3339(p.HeartbeatAt), HumanDuration(now.Sub(p.HeartbeatAt)))
	}
	line += ", version " + OrDash(p.Version)
	if p.LastError != "" {
		line += ", last error: " + OneLine(p.LastError, 160)
	}
	return line
}

// mappedTables are the record's tables read with a mapping file, by name.
func mappedTables(r registry.Record) []string {
	return slices.Sorted(maps.Keys(r.Mappings))
}

// plural is n and the noun, with an s unless n is 1.
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
