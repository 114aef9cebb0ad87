package snapshot

import (
	"encoding/binary"
	"reflect"
	"strings"
	"testing"
)

// relationMsg and insertMsg build pgoutput proto_version 1 messages as pg_logical_slot_peek_binary_changes
// returns them.
func relationMsg(oid uint32, ns, name string, cols ...string) []byte {
	b := []byte{'R'}
	b = binary.BigEndian.AppendUint32(b, oid)
	b = append(append(b, ns...), 0)
	b = append(append(b, name...), 0)
	b = append(b, 'd')
	b = binary.BigEndian.AppendUint16(b, uint16(len(cols)))
	for _, c := range cols {
		b = append(b, 0)
		b = append(append(b, c...), 0)
		b = binary.BigEndian.AppendUint32(b, 25)
		b = binary.BigEndian.AppendUint32(b, 0xffffffff)
	}
	return b
}

func insertMsg(oid uint32, values ...*string) []byte {
	b := []byte{'I'}
	b = binary.BigEndian.AppendUint32(b, oid)
	b = append(b, 'N')
	b = binary.BigEndian.AppendUint16(b, uint16(len(values)))
	for _, v := range values {
		if v == nil {
			b = append(b, 'n')
			continue
		}
		b = append(b, 't')
		b = binary.BigEndian.AppendUint32(b, uint32(len(*v)))
		b = append(b, *v...)
	}
	return b
}

func text(s string) *string { return &s }

// TestInsertKeys: an Insert of a watched table (by namespace and name, as the stream's decoder matches)
// gives its key's text in StreamKey's order, wherever the columns are; the Inserts of other tables, other
// messages, and a key with a NULL part give nothing; a truncated message is an error.
func TestInsertKeys(t *testing.T) {
	k := newInsertKeys(map[string][]string{
		"outbox":        {"aggregate_type", "aggregate_id", "aggregate_version", "id"},
		"public.mapped": {"seq"},
	})
	type got struct {
		table string
		key   []string
	}
	var out []got
	for i, msg := range [][]byte{
		{'B', 0, 0, 0, 0, 0, 0, 0, 1},
		relationMsg(10, "public", "outbox", "id", "aggregate_type", "aggregate_id", "aggregate_version", "payload"),
		insertMsg(10, text("u1"), text("order"), text("a1"), text("9"), text("{}")),
		relationMsg(11, "public", "mapped", "seq", "aggregateid", "version"),
		insertMsg(11, text("113"), text("w1-1"), text("10")),
		relationMsg(12, "other", "outbox", "id", "aggregate_type", "aggregate_id", "aggregate_version"),
		insertMsg(12, text("u2"), text("order"), text("a1"), text("10")), // another schema's table
		insertMsg(10, text("u3"), nil, text("a1"), text("11"), text("{}")),
		{'C', 0},
		relationMsg(10, "public", "outbox", "aggregate_version", "aggregate_id", "aggregate_type", "id"), // columns moved
		insertMsg(10, text("12"), text("a1"), text("order"), text("u4")),
	} {
		table, key, ok, err := k.parse(msg)
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if ok {
			out = append(out, got{table, key})
		}
	}
	want := []got{
		{"public.outbox", []string{"order", "a1", "9", "u1"}},
		{"public.mapped", []string{"113"}},
		{"public.outbox", []string{"order", "a1", "12", "u4"}},
	}
	if !reflect.DeepEqual(out, want) {
		t.Fatalf("keys %q, want %q", out, want)
	}
	full := insertMsg(10, text("u5"), text("order"), text("a1"), text("13"))
	for _, msg := range [][]byte{full[:len(full)-1], relationMsg(13, "public", "outbox", "id")[:9]} {
		if _, _, _, err := k.parse(msg); err == nil || !strings.Contains(err.Error(), "truncated") {
			t.Errorf("a truncated %c message: %v, want an error saying so", msg[0], err)
		}
	}
}
