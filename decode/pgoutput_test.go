package decode

import (
	"encoding/binary"

	"github.com/cdc-router/cdc-router/internal/cdc"
)

// This file builds pgoutput proto_version 1 messages by hand, per PostgreSQL's "Logical Replication
// Message Formats".

// tv is one TupleData column for the encoder.
type tv struct {
	kind byte // 'n', 'u', 't' or 'b'
	s    string
}

func text(s string) tv { return tv{kind: 't', s: s} }
func null() tv         { return tv{kind: 'n'} }
func unchanged() tv    { return tv{kind: 'u'} }

func appendString(b []byte, s string) []byte { return append(append(b, s...), 0) }

func appendTuple(b []byte, cols []tv) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(cols)))
	for _, c := range cols {
		b = append(b, c.kind)
		if c.kind == 't' || c.kind == 'b' {
			b = binary.BigEndian.AppendUint32(b, uint32(len(c.s)))
			b = append(b, c.s...)
		}
	}
	return b
}

func encBegin(final cdc.LSN, xid uint32) []byte {
	b := binary.BigEndian.AppendUint64([]byte{'B'}, uint64(final))
	b = binary.BigEndian.AppendUint64(b, 757_382_400_000_000) // commit time, µs since 2000-01-01
	return binary.BigEndian.AppendUint32(b, xid)
}

func encCommit(commit, end cdc.LSN) []byte {
	b := binary.BigEndian.AppendUint64([]byte{'C', 0}, uint64(commit))
	b = binary.BigEndian.AppendUint64(b, uint64(end))
	return binary.BigEndian.AppendUint64(b, 757_382_400_000_000)
}

// encRelation builds a Relation message; an outbox column gets the type migrations/sql/002_outbox.sql
// gives it, any other column text.
func encRelation(oid uint32, namespace, name string, columns ...string) []byte {
	types := make([]uint32, len(columns))
	for i, c := range columns {
		types[i] = oidText
		if col, ok := columnByName(c); ok {
			types[i] = acceptedTypes(col)[0]
		}
	}
	return encRelationTypes(oid, namespace, name, columns, types)
}

// encRelationTypes builds a Relation message with the given column type OIDs.
func encRelationTypes(oid uint32, namespace, name string, columns []string, types []uint32) []byte {
	b := binary.BigEndian.AppendUint32([]byte{'R'}, oid)
	b = appendString(appendString(b, namespace), name)
	b = append(b, 'd') // replica identity: default
	b = binary.BigEndian.AppendUint16(b, uint16(len(columns)))
	for i, c := range columns {
		flags := byte(0)
		if i == 0 {
			flags = 1 // key column
		}
		b = appendString(append(b, flags), c)
		b = binary.BigEndian.AppendUint32(b, types[i])
		b = binary.BigEndian.AppendUint32(b, 0xFFFFFFFF)
	}
	return b
}

func encInsert(oid uint32, cols ...tv) []byte {
	b := binary.BigEndian.AppendUint32([]byte{'I'}, oid)
	return appendTuple(append(b, 'N'), cols)
}

// encUpdate builds an Update; old is 0 (no old tuple), 'K' or 'O'.
func encUpdate(oid uint32, old byte, oldCols, newCols []tv) []byte {
	b := binary.BigEndian.AppendUint32([]byte{'U'}, oid)
	if old != 0 {
		b = appendTuple(append(b, old), oldCols)
	}
	return appendTuple(append(b, 'N'), newCols)
}

func encDelete(oid uint32, old byte, cols ...tv) []byte {
	b := binary.BigEndian.AppendUint32([]byte{'D'}, oid)
	return appendTuple(append(b, old), cols)
}

func encTruncate(oids ...uint32) []byte {
	b := binary.BigEndian.AppendUint32([]byte{'T'}, uint32(len(oids)))
	b = append(b, 0)
	for _, o := range oids {
		b = binary.BigEndian.AppendUint32(b, o)
	}
	return b
}

func encOrigin(lsn cdc.LSN, name string) []byte {
	return appendString(binary.BigEndian.AppendUint64([]byte{'O'}, uint64(lsn)), name)
}

func encType(oid uint32, namespace, name string) []byte {
	return appendString(appendString(binary.BigEndian.AppendUint32([]byte{'Y'}, oid), namespace), name)
}

func encMessage(transactional bool, lsn cdc.LSN, prefix, content string) []byte {
	flags := byte(0)
	if transactional {
		flags = 1
	}
	b := binary.BigEndian.AppendUint64([]byte{'M', flags}, uint64(lsn))
	b = binary.BigEndian.AppendUint32(appendString(b, prefix), uint32(len(content)))
	return append(b, content...)
}

// outboxColumns is the outbox table's column order.
func outboxColumns() []string {
	return []string{"id", "aggregate_type", "aggregate_id", "aggregate_version", "event_type",
		"schema_version", "payload", "headers", "occurred_at"}
}

// outboxRow is a valid outbox row in outboxColumns order.
func outboxRow(id string, version string) []tv {
	return []tv{text(id), text("order"), text("o-1"), text(version), text("OrderPlaced"),
		text("1"), text(`{"total": 12.5}`), text(`{"trace": "abc"}`), text("2024-01-02 03:04:05.123456+00")}
}
