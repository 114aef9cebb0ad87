package decode

import (
	"crypto/sha256"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cdc-router/cdc-router/internal/cdc"
)

const envelope1 = `{"id": "` + id1 + `", "aggregate_type": "order", "aggregate_id": "42", "aggregate_version": 3,
	"event_type": "paid", "payload": {"amount": "16.06"}, "headers": {"traceparent": "00-x"},
	"occurred_at": "2026-05-01T12:00:00.5+02:00"}`

// testEmitKey is the emit key of the tests, with id testEmitKeyID; testXID the xid of their transactions.
var testEmitKey = []byte("0123456789abcdef0123456789abcdef")

const testEmitKeyID, testXID = 3, 7

var testEmitKeys = map[uint32][]byte{testEmitKeyID: testEmitKey}

// signed is content as <schema>.emit writes it in the transaction with testXID.
func signed(content string) string {
	return string(SignEmitted(testEmitKeyID, testEmitKey, testXID, []byte(content)))
}

func TestDecodeMessages(t *testing.T) {
	const prefix = "cdc-router.outbox"
	cfg := Config{MessagePrefix: prefix, EmitKeys: testEmitKeys}
	begin, commit := frame{0x100, encBegin(0x200, testXID)}, frame{0x230, encCommit(0x200, 0x230)}
	// msg is a message; a transactional one is signed as emit signs it.
	msg := func(walStart uint64, transactional bool, prefix, content string) frame {
		if transactional {
			content = signed(content)
		}
		return frame{cdc.LSN(walStart), encMessage(transactional, cdc.LSN(walStart), prefix, content)}
	}

	t.Run("an envelope is an event like a row", func(t *testing.T) {
		rec, err := decodeFrames(cfg, []frame{begin, msg(0x110, true, prefix, envelope1), commit})
		if err != nil {
			t.Fatal(err)
		}
		if len(rec.events) != 1 || len(rec.quarantined) != 0 {
			t.Fatalf("%v", rec.log)
		}
		ev := rec.events[0]
		want := time.Date(2026, 5, 1, 10, 0, 0, 5e8, time.UTC)
		if ev.ID != id1 || ev.AggregateType != "order" || ev.AggregateID != "42" || ev.AggregateVersion != 3 ||
			ev.EventType != "paid" || ev.SchemaVersion != 1 || string(ev.Payload) != `{"amount": "16.06"}` ||
			string(ev.Headers) != `{"traceparent": "00-x"}` || !ev.OccurredAt.Equal(want) || ev.CommitLSN != 0x200 ||
			ev.LSN != 0x110 || ev.Ordinal != 0 {
			t.Fatalf("event %+v", ev)
		}
	})

	t.Run("defaults: schema version 1, no headers, the commit time", func(t *testing.T) {
		content := `{"id": "` + id1 + `", "aggregate_type": "order", "aggregate_id": "42", "aggregate_version": 1,
			"event_type": "paid", "payload": null, "headers": null, "unknown": true}`
		rec, err := decodeFrames(cfg, []frame{begin, msg(0x110, true, prefix, content), commit})
		if err != nil || len(rec.events) != 1 {
			t.Fatalf("%v %v", rec.log, err)
		}
		ev := rec.events[0]
		if ev.SchemaVersion != 1 || len(ev.Headers) != 0 || string(ev.Payload) != "null" ||
			!ev.OccurredAt.Equal(time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)) {
			t.Fatalf("event %+v", ev)
		}
	})

	t.Run("rows and messages keep their order and positions", func(t *testing.T) {
		const oid = 16385
		rel := frame{0, encRelation(oid, "public", "outbox", outboxColumns()...)}
		env2 := strings.Replace(strings.Replace(envelope1, id1, id2, 1), `"aggregate_version": 3`, `"aggregate_version": 4`, 1)
		rec, err := decodeFrames(cfg, []frame{rel, begin, {0x110, encInsert(oid, outboxRow(uuidN(1), "2")...)},
			msg(0x120, true, prefix, envelope1), msg(0x130, true, "other", envelope1), msg(0x140, true, prefix, env2), commit})
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(rec.shape, ","); got != "B,E "+uuidN(1)+",E "+id1+",E "+id2+",C" {
			t.Fatalf("shape %s", got)
		}
	})

	t.Run("malformed envelopes are quarantined and the stream goes on", func(t *testing.T) {
		for content, reason := range map[string]string{
			`{"id": "` + id1 + `"`:  "the content is not a JSON object",
			`[1]`:                   "the content is not a JSON object",
			`{} {}`:                 "after top-level value",
			`{"id": "` + id1 + `"}`: "column aggregate_type is missing",
			strings.Replace(envelope1, `: 3`, `: "3"`, 1):                             `aggregate_version "\"3\"" is not a JSON integer`,
			strings.Replace(envelope1, `: 3`, `: 3.5`, 1):                             "aggregate_version \"3.5\" is not an integer",
			strings.Replace(envelope1, `"paid"`, `7`, 1):                              "event_type \"7\" is not a JSON string",
			strings.Replace(envelope1, `"42"`, `null`, 1):                             "column aggregate_id is NULL",
			strings.Replace(envelope1, id1, "x", 1):                                   `id "x" is not a uuid`,
			strings.Replace(envelope1, `{"traceparent": "00-x"}`, `[1]`, 1):           "headers is not a JSON object",
			strings.Replace(envelope1, "2026-05-01T12:00:00.5+02:00", "yesterday", 1): "occurred_at \"yesterday\" is not an RFC 3339 time",
		} {
			rec, err := decodeFrames(cfg, []frame{begin, msg(0x110, true, prefix, content), msg(0x120, true, prefix, envelope1), commit})
			if err != nil {
				t.Fatalf("%s: %v", content, err)
			}
			if len(rec.quarantined) != 1 || len(rec.events) != 1 {
				t.Fatalf("%s: %v", content, rec.log)
			}
			q := rec.quarantined[0]
			if !strings.Contains(q.Reason, reason) || q.Table != "message:"+prefix || q.LSN != 0x110 || q.CommitLSN != 0x200 ||
				rawText(q.Columns["content"]) != content {
				t.Errorf("%s: quarantined %+v, want reason %q", content, q, reason)
			}
		}
	})

	t.Run("payload limits: the router's, and the envelope's before any parsing", func(t *testing.T) {
		big := strings.Replace(envelope1, `{"amount": "16.06"}`, `"`+strings.Repeat("a", 100)+`"`, 1)
		huge := `{"id": "` + id1 + `", "payload": "` + strings.Repeat("a", 2*DefaultMaxPayloadBytes) + `"}`
		for content, reason := range map[string]string{
			big:  "payload is 102 bytes, over the 64-byte limit (--max-payload-bytes)",
			huge: "over the 16777216-byte limit of an envelope",
		} {
			rec, err := decodeFrames(Config{MessagePrefix: prefix, MaxPayloadBytes: 64, EmitKeys: testEmitKeys}, []frame{begin, msg(0x110, true, prefix, content), commit})
			if err != nil || len(rec.quarantined) != 1 || !strings.Contains(rec.quarantined[0].Reason, reason) {
				t.Fatalf("%v %v, want %q", rec.log, err, reason)
			}
			if q := rec.quarantined[0]; q.Columns["content"].Size != int64(len(content)) || len(q.Columns["content"].Text) > 64<<10 {
				t.Fatalf("stored content: size %d, %d bytes kept", q.Columns["content"].Size, len(q.Columns["content"].Text))
			}
		}
	})

	t.Run("a non-transactional message is quarantined, never published", func(t *testing.T) {
		rec, err := decodeFrames(cfg, []frame{msg(0x90, false, prefix, envelope1), begin, commit})
		if err != nil {
			t.Fatal(err)
		}
		if len(rec.events) != 0 || len(rec.quarantined) != 1 || !strings.Contains(rec.quarantined[0].Reason, "non-transactional") ||
			rec.quarantined[0].EventID != id1 || rec.quarantined[0].CommitLSN != 0 {
			t.Fatalf("%v", rec.log)
		}
	})

	t.Run("without the prefix, or with another, messages are skipped", func(t *testing.T) {
		for _, c := range []Config{{}, {MessagePrefix: "x", EmitKeys: testEmitKeys}} {
			rec, err := decodeFrames(c, []frame{msg(0x90, false, prefix, envelope1), begin, msg(0x110, true, prefix, envelope1), commit})
			if err != nil || len(rec.events)+len(rec.quarantined) != 0 {
				t.Fatalf("%+v: %v %v", c, rec.log, err)
			}
		}
	})

	t.Run("a transactional message outside a transaction is a protocol error", func(t *testing.T) {
		_, err := decodeFrames(cfg, []frame{msg(0x90, true, prefix, envelope1)})
		var pe *ProtocolError
		if !errors.As(err, &pe) {
			t.Fatalf("%v", err)
		}
	})
}

// TestDecodeUnauthenticatedMessages: a message with the prefix that is unsigned, signed with a key the router
// does not hold, forged, altered, or signed in another transaction is quarantined with the reason
// "unauthenticated emitted message: …", and the signed event after it is published.
func TestDecodeUnauthenticatedMessages(t *testing.T) {
	const prefix = "cdc-router.outbox"
	cfg := Config{MessagePrefix: prefix, EmitKeys: testEmitKeys}
	begin, commit := frame{0x100, encBegin(0x200, testXID)}, frame{0x230, encCommit(0x200, 0x230)}
	good := signed(envelope1)
	forged := strings.Replace(good, good[5:15], "0000000000", 1)
	for name, c := range map[string]struct{ content, reason string }{
		"unsigned":                  {envelope1, "it carries no MAC"},
		"another transaction's xid": {string(SignEmitted(testEmitKeyID, testEmitKey, testXID+1, []byte(envelope1))), "does not match"},
		"another key":               {string(SignEmitted(testEmitKeyID, []byte("another key"), testXID, []byte(envelope1))), "does not match"},
		"an unknown key id":         {string(SignEmitted(9, testEmitKey, testXID, []byte(envelope1))), "signed with key 9, which the router does not hold"},
		"a forged MAC":              {forged, "does not match"},
		"an altered envelope":       {strings.Replace(good, `"paid"`, `"refunded"`, 1), "does not match"},
		"a bad signature line":      {"v1:3:xyz\n" + envelope1, "signature line is malformed"},
		"no signature line":         {"v2:3:" + strings.Repeat("00", 32) + "\n" + envelope1, "does not start with a signature line"},
		"empty":                     {"", "does not start with a signature line"},
		"a large unsigned one":      {strings.Replace(envelope1, "16.06", strings.Repeat("9", 100<<10), 1), "it carries no MAC"},
	} {
		frames := []frame{begin, {0x110, encMessage(true, 0x110, prefix, c.content)},
			{0x120, encMessage(true, 0x120, prefix, signed(strings.Replace(envelope1, id1, id2, 1)))}, commit}
		rec, err := decodeFrames(cfg, frames)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(rec.quarantined) != 1 || len(rec.events) != 1 || rec.events[0].ID != id2 {
			t.Fatalf("%s: %v", name, rec.log)
		}
		q := rec.quarantined[0]
		stored := q.Columns["content"]
		if !strings.HasPrefix(q.Reason, "unauthenticated emitted message: ") || !strings.Contains(q.Reason, c.reason) ||
			q.LSN != 0x110 || q.CommitLSN != 0x200 || q.EventID != "" || stored.Size != int64(len(c.content)) ||
			len(stored.Text) > MaxUnauthenticatedStored || stored.SHA256 != sha256.Sum256([]byte(c.content)) {
			t.Errorf("%s: quarantined %+v, want reason %q", name, q, c.reason)
		}
	}
	// Without keys nothing is published.
	rec, err := decodeFrames(Config{MessagePrefix: prefix}, []frame{begin, {0x110, encMessage(true, 0x110, prefix, good)}, commit})
	if err != nil || len(rec.events) != 0 || len(rec.quarantined) != 1 {
		t.Fatalf("without keys: %v %v", rec.log, err)
	}
}
