package decode

import (
	"testing"
)

// FuzzMappedInsert: any column text in a mapped table gives exactly one event or one quarantine, never an
// error or a panic.
func FuzzMappedInsert(f *testing.F) {
	f.Add(id1, "Order", "o-1", `{"a":1}`, `\x00ff`, "2024-01-02 03:04:05+00", "traceparent=x", "7", "t")
	f.Add("", "", "", "", `\x0`, "", "\\", "x", "")
	m, err := parseMapping("table.field.event.timestamp=ts\ntable.fields.additional.placement=raw:header,n:envelope,b:header\n" +
		"route.tombstone.on.empty.payload=true\ntable.expand.json.payload=true\nroute.topic.regex=(?<routedByValue>[a-z]*)(.*)\n" +
		"route.topic.replacement=$2.${routedByValue}")
	if err != nil {
		f.Fatal(err)
	}
	names := []string{"id", "aggregatetype", "aggregateid", "payload", "raw", "ts", "tracingspancontext", "n", "b"}
	types := []uint32{oidText, oidText, oidInt8, oidJSONB, oidBytea, oidTimestamptz, oidText, oidInt4, oidBool}
	f.Fuzz(func(t *testing.T, id, route, key, payload, raw, ts, trace, n, b string) {
		values := []tv{text(id), text(route), text(key), text(payload), text(raw), text(ts), text(trace), text(n), text(b)}
		for i, v := range values {
			if v.s == "" && i%2 == 1 {
				values[i] = null()
			}
		}
		rec, err := decodeFrames(Config{Mapping: m}, []frame{{0x100, encBegin(0x200, 7)},
			{0, encRelationTypes(16390, "public", "outbox", names, types)}, {0x110, encInsert(16390, values...)},
			{0x210, encCommit(0x200, 0x210)}})
		if err != nil {
			t.Fatal(err)
		}
		if len(rec.events)+len(rec.quarantined) != 1 {
			t.Fatalf("want one event or quarantine, got %v", rec.shape)
		}
	})
}
