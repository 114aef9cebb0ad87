package admin

import (
	"encoding/json"
	"testing"
)

// TestStatusJSONOfAMissingOrForeignSlot: facts that do not apply are null, never left out, and jobs is an
// empty array rather than null, so a script can read every key of the schema.
func TestStatusJSONOfAMissingOrForeignSlot(t *testing.T) {
	for _, r := range []Report{
		{Slot: "s", Database: "app"},
		{Slot: "s", Database: "app", SlotDatabase: "other"},
	} {
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		var got map[string]any
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatal(err)
		}
		for _, key := range []string{"active", "confirmed_flush_lsn", "lag_bytes", "lag_seconds", "wal_status",
			"retained_wal_bytes", "safe_wal_size_bytes", "stored_position", "failover", "synced", "invalidation_reason",
			"pending_events", "shard"} {
			if v, ok := got[key]; !ok || v != nil {
				t.Errorf("%s: %s = %#v (present %v), want null", b, key, v, ok)
			}
		}
		for _, key := range []string{"jobs", "shards"} {
			if list, ok := got[key].([]any); !ok || len(list) != 0 {
				t.Errorf("%s: %s = %#v, want []", b, key, got[key])
			}
		}
		if got["schema_version"] != float64(StatusSchemaVersion) || got["slot_exists"] != false {
			t.Errorf("%s", b)
		}
		if want := r.SlotDatabase; (want == "" && got["slot_database"] != nil) || (want != "" && got["slot_database"] != want) {
			t.Errorf("%s: slot_database = %#v, want %q or null", b, got["slot_database"], want)
		}
	}
}
