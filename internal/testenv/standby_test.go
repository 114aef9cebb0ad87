package testenv

import (
	"context"
	"testing"
	"time"
)

// TestPairSyncsFailoverSlotAndPromotes checks the harness itself on PostgreSQL 17: a logical slot created
// with failover on the primary shows synced = true on the standby, and after a promotion the standby is a
// primary that still has the slot.
func TestPairSyncsFailoverSlotAndPromotes(t *testing.T) {
	bin, err := PostgresBin(17)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := StartPair(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer pair.Close()
	ctx := context.Background()
	var lsn string
	if err := queryRow(ctx, pair.Primary.URL("postgres"),
		"SELECT lsn::text FROM pg_create_logical_replication_slot('pair_check', 'pgoutput', false, false, true)", &lsn); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		var synced bool
		err := queryRow(ctx, pair.Standby.URL("postgres"),
			"SELECT coalesce(bool_or(synced AND NOT temporary), false) FROM pg_replication_slots WHERE slot_name = 'pair_check'", &synced)
		if err == nil && synced {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the failover slot is not synced on the standby after 60 s (%v):\n%s", err, pair.Log(20))
		}
		time.Sleep(200 * time.Millisecond)
	}
	pair.Primary.Stop("immediate")
	if err := pair.Promote(); err != nil {
		t.Fatal(err)
	}
	var recovery bool
	var slots int
	if err := queryRow(ctx, pair.Standby.URL("postgres"), "SELECT pg_is_in_recovery()", &recovery); err != nil || recovery {
		t.Fatalf("after the promotion pg_is_in_recovery() = %v, %v; want false", recovery, err)
	}
	if err := queryRow(ctx, pair.Standby.URL("postgres"),
		"SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'pair_check'", &slots); err != nil || slots != 1 {
		t.Fatalf("the promoted standby has %d slots named pair_check (%v), want 1", slots, err)
	}
}
