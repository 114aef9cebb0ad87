package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/admin"
	"github.com/cdc-router/cdc-router/decode"
	"github.com/cdc-router/cdc-router/decode/mapping"
	"github.com/cdc-router/cdc-router/quarantine"
	"github.com/cdc-router/cdc-router/registry"
)

// An operator command (status, reset, backfill, quarantine replay) works on one router's slot and needs
// the settings that router runs with. It takes them from the router's record (registry) rather than from
// its own flags' defaults: only the slot needs naming, and none when the database has one router. A
// setting the command line, the environment or a configuration file gives that contradicts the record is
// refused naming both values.

// recorded is a one-value flag of an operator command that the record of the slot's router supplies.
type recorded struct {
	flag  string
	value *string
	of    func(registry.Record) string
}

// slotOf settles which slot a command works on when --slot was not given: the one slot the records name,
// or the default when there is none; several are refused naming them, also when the default is one of them
// (a reset must not guess). recs are the records that could be meant.
func slotOf(s *settings, slot *string, recs []registry.Record) error {
	if s.sources["slot"] != sourceDefault {
		return nil
	}
	var slots []string
	for _, r := range recs {
		if !slices.Contains(slots, r.Slot) {
			slots = append(slots, r.Slot)
		}
	}
	switch {
	case len(slots) == 1:
		*slot = slots[0]
	case len(slots) > 1:
		slices.Sort(slots)
		return usageError{fmt.Errorf("this database has the routers of slots %s: name one with --slot "+
			"(cdc-router status lists them)", strings.Join(slots, ", "))}
	}
	return nil
}

// fromRecord reads the record of slot's router and sets each of fill that was left at its default to the
// record's value; a value given that differs is refused. ok is false when the slot has no record (a router
// of a version before records, or none ran yet): the flags then stand as given.
func fromRecord(ctx context.Context, conn *pgx.Conn, s *settings, schema, slot string, fill ...recorded) (registry.Record, bool, error) {
	rec, ok, err := registry.Of(ctx, conn, schema, slot)
	if err != nil || !ok {
		return rec, ok, err
	}
	for _, f := range fill {
		want := f.of(rec)
		switch {
		case s.sources[f.flag] == sourceDefault:
			*f.value = want
		case *f.value != want:
			return rec, ok, usageError{fmt.Errorf("--%s %s (from the %s) contradicts the router of slot %s, which runs with %s "+
				"(recorded %s by %s): drop the setting, or name another --slot", f.flag, shown(*f.value), s.sources[f.flag], slot,
				shown(want), rec.HeartbeatAt.UTC().Format(time.RFC3339), rec.Host)}
		}
	}
	return rec, ok, nil
}

func shown(v string) string {
	if v == "" {
		return "(none)"
	}
	return v
}

func publicationOf(r registry.Record) string   { return r.Publication }
func messagePrefixOf(r registry.Record) string { return r.MessagePrefix }
func exchangeOf(r registry.Record) string      { return r.Exchange }

// recordedMappings are the mappings of the record's tables, read from the texts it keeps.
func recordedMappings(rec registry.Record) (map[string]*decode.Mapping, error) {
	out := map[string]*decode.Mapping{}
	for table, text := range rec.Mappings {
		m, err := mapping.ParseMapping(text)
		if err != nil {
			return nil, fmt.Errorf("the mapping of %s recorded by the router of slot %s: %w", table, rec.Slot, err)
		}
		out[table] = m
	}
	return out, nil
}

// replayed is what quarantine replay takes from the records of the routers whose quarantine records it
// replays: their tables' mappings, the one table and slot the records share (empty when they differ).
type replayed struct {
	mappings    map[string]*decode.Mapping
	table, slot string
}

// replayRouters reads the quarantine records ids, then the records of their routers: the mappings they
// recorded and, unless --exchange was given, the exchange they publish to, which must be one.
func replayRouters(ctx context.Context, conn *pgx.Conn, s *settings, schema string, ids []int64, broker brokerFlags) (replayed, error) {
	out := replayed{mappings: map[string]*decode.Mapping{}}
	records := quarantine.NewRecords(conn, schema)
	var slots, tables []string
	for _, id := range ids {
		q, ok, err := records.Load(ctx, id)
		if err != nil || !ok { // Replay names a record that does not exist
			continue
		}
		if !slices.Contains(slots, q.Slot) {
			slots = append(slots, q.Slot)
		}
		if q.Table != "" && !slices.Contains(tables, decode.QualifiedTable(q.Table)) {
			tables = append(tables, decode.QualifiedTable(q.Table))
		}
	}
	if len(tables) == 1 {
		out.table = tables[0]
	}
	if len(slots) == 1 {
		out.slot = slots[0]
	}
	var exchanges []string
	for _, slot := range slots {
		rec, ok, err := registry.Of(ctx, conn, schema, slot)
		if err != nil {
			return out, err
		}
		if !ok {
			continue
		}
		m, err := recordedMappings(rec)
		if err != nil {
			return out, err
		}
		maps.Copy(out.mappings, m)
		if !slices.Contains(exchanges, rec.Exchange) {
			exchanges = append(exchanges, rec.Exchange)
		}
	}
	switch {
	case s.sources["exchange"] != sourceDefault || len(exchanges) == 0:
	case len(exchanges) == 1:
		*broker.exchange = exchanges[0]
	default:
		return out, usageError{fmt.Errorf("the records' routers publish to the exchanges %s: replay the records of one "+
			"router at a time, or name the exchange with --exchange", strings.Join(exchanges, ", "))}
	}
	return out, nil
}

// statusOfFleet prints every router and slot of the database (admin.Fleet) when status was named no slot
// and the database has more than one; listed is false when the report of its one slot follows instead.
func statusOfFleet(ctx context.Context, conn *pgx.Conn, pg pgFlags, shard string, asJSON bool, stdout io.Writer) (listed bool, err error) {
	if shard != "" || pg.set.sources["slot"] != sourceDefault {
		return false, nil
	}
	f, err := admin.Fleet(ctx, conn, *pg.schema)
	if err != nil || len(f.Slots) <= 1 {
		return false, err
	}
	if err := f.CountPendingOfStopped(ctx, conn); err != nil {
		return false, err
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return true, enc.Encode(f)
	}
	fmt.Fprint(stdout, f)
	return true, nil
}
