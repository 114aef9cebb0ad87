package pgserver

import (
	"strings"
	"testing"

	"github.com/jackc/pglogrepl"

	"github.com/cdc-router/cdc-router/offsets"
)

func TestDecideStart(t *testing.T) {
	cfg := StartRules{Slot: "s1"}
	sys := pglogrepl.IdentifySystemResult{SystemID: "42", Timeline: 1, DBName: "app"}
	live := SlotInfo{Exists: true, Plugin: "pgoutput", Database: "app", ConfirmedFlush: 100, WALStatus: "reserved"}
	cases := []struct {
		name      string
		slot      SlotInfo
		stored    *offsets.Position
		wantErr   string
		create    bool
		wantStart uint64
	}{
		{name: "fresh: create", slot: SlotInfo{}, create: true},
		{name: "slot, nothing stored: its confirmed_flush", slot: live, wantStart: 100},
		{name: "stored behind the slot: the slot's position", slot: live, stored: &offsets.Position{LSN: 90, SystemID: "42"}, wantStart: 100},
		{name: "stored ahead of the slot (PostgreSQL crashed): the stored one", slot: live,
			stored: &offsets.Position{LSN: 150, SystemID: "42"}, wantStart: 150},
		{name: "slot missing, position stored: refuse", slot: SlotInfo{}, stored: &offsets.Position{LSN: 90, SystemID: "42"},
			wantErr: "does not exist but a position"},
		{name: "slot lost: refuse", slot: SlotInfo{Exists: true, Plugin: "pgoutput", WALStatus: "lost"},
			wantErr: "wal_status lost"},
		{name: "slot lost, nothing stored: refuse too", slot: SlotInfo{Exists: true, Plugin: "pgoutput", Database: "app", WALStatus: "lost"},
			wantErr: "cdc-router reset --slot s1"},
		{name: "slot idle too long (PostgreSQL 18): refuse naming the setting", slot: SlotInfo{Exists: true, Plugin: "pgoutput",
			Database: "app", WALStatus: "lost", Invalidation: "idle_timeout"}, stored: &offsets.Position{LSN: 90, SystemID: "42"},
			wantErr: "idle_replication_slot_timeout"},
		{name: "invalidated, wal_status not yet lost: refuse", slot: SlotInfo{Exists: true, Plugin: "pgoutput",
			Database: "app", WALStatus: "reserved", Invalidation: "rows_removed"}, wantErr: "hot_standby_feedback"},
		{name: "position of another cluster: refuse", slot: live, stored: &offsets.Position{LSN: 90, SystemID: "7"},
			wantErr: "written by PostgreSQL cluster 7"},
		{name: "other plugin: refuse", slot: SlotInfo{Exists: true, Plugin: "wal2json", Database: "app"}, wantErr: "not pgoutput"},
		{name: "slot of another database: refuse", slot: SlotInfo{Exists: true, Plugin: "pgoutput", Database: "other"},
			wantErr: "belongs to database other"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var stored offsets.Position
			if tc.stored != nil {
				stored = *tc.stored
			}
			d, err := DecideStart(cfg, sys, tc.slot, stored, tc.stored != nil, "")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !isFatal(err) {
					t.Fatalf("err = %v, want a Fatal containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d.Create != tc.create || uint64(d.Start) != tc.wantStart {
				t.Fatalf("decision %+v, want create=%v start=%d", d, tc.create, tc.wantStart)
			}
		})
	}
}

// TestDecideStartAfterPromotion: a promoted standby has the same system id and a later timeline. With the
// slot there (synchronized), the router goes on from the later of the slot's and the stored position; without
// it, the slot-lost refusal, with a hint that names --failover-slot (or, with it, the standby settings).
func TestDecideStartAfterPromotion(t *testing.T) {
	sys := pglogrepl.IdentifySystemResult{SystemID: "42", Timeline: 2, DBName: "app"}
	stored := offsets.Position{LSN: 90, SystemID: "42", Timeline: 1}
	synced := SlotInfo{Exists: true, Plugin: "pgoutput", Database: "app", ConfirmedFlush: 80, WALStatus: "reserved",
		Failover: true, Synced: true}
	d, err := DecideStart(StartRules{Slot: "s1"}, sys, synced, stored, true, "")
	if err != nil || d.Create || d.Start != 90 {
		t.Fatalf("synced slot after a promotion: %+v, %v; want start at the stored 90", d, err)
	}
	for _, tc := range []struct {
		failover bool
		want     string
	}{
		{false, "run the router with --failover-slot"},
		{true, "check sync_replication_slots = on"},
	} {
		_, err := DecideStart(StartRules{Slot: "s1", FailoverSlot: tc.failover}, sys, SlotInfo{}, stored, true, "")
		if err == nil || !isFatal(err) || !strings.Contains(err.Error(), "does not exist but a position") ||
			!strings.Contains(err.Error(), "cdc-router reset --slot s1") || !strings.Contains(err.Error(), tc.want) ||
			!strings.Contains(err.Error(), "timeline 2, the position is of timeline 1") {
			t.Errorf("slot missing after a promotion (failover %v): %v; want the slot-lost refusal with %q", tc.failover, err, tc.want)
		}
	}
	// Promoted during the initial snapshot: no standby had the slot, whatever the settings.
	_, err = DecideStart(StartRules{Slot: "s1", FailoverSlot: true}, sys, SlotInfo{}, stored, true, "4000 of 10000 rows")
	if err == nil || !isFatal(err) || !strings.Contains(err.Error(), "cdc-router reset --slot s1") ||
		!strings.Contains(err.Error(), "initial snapshot was unfinished (4000 of 10000 rows)") ||
		strings.Contains(err.Error(), "check sync_replication_slots") {
		t.Errorf("slot missing after a promotion during the initial snapshot: %v", err)
	}
	same := stored
	same.Timeline = 2
	if _, err := DecideStart(StartRules{Slot: "s1"}, sys, SlotInfo{}, same, true, ""); err == nil ||
		strings.Contains(err.Error(), "promoted") {
		t.Errorf("slot missing on the same timeline: %v; want the refusal without the promotion hint", err)
	}
}
