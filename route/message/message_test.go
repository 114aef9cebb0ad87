package message

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cdc-router/cdc-router/route/message/messagetest"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/cdc-router/cdc-router/internal/cdc"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// describe renders a message deterministically for the golden files.
func describe(key string, m amqp.Publishing) string {
	var b strings.Builder
	fmt.Fprintf(&b, "routing_key: %s\ncontent_type: %s\ndelivery_mode: %d\nmessage_id: %s\ntype: %s\ntimestamp: %s\nheaders:\n",
		key, m.ContentType, m.DeliveryMode, m.MessageId, m.Type, m.Timestamp.UTC().Format(time.RFC3339Nano))
	keys := make([]string, 0, len(m.Headers))
	for k := range m.Headers {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "  %s: %T %#v\n", k, m.Headers[k], m.Headers[k])
	}
	fmt.Fprintf(&b, "body: %s\n", m.Body)
	return b.String()
}

func TestMessageGolden(t *testing.T) {
	cases := map[string]func(*cdc.Event){
		"plain":    func(*cdc.Event) {},
		"backfill": func(ev *cdc.Event) { ev.Backfill = true },
		"user_headers": func(ev *cdc.Event) {
			ev.Headers = []byte(`{"trace_id":"abc","retries":3,"big":18446744073709551616,"ratio":0.25,` +
				`"sampled":true,"tags":["a", "b"],"ctx":{"k": 1},"gone":null,"neg":-9223372036854775808}`)
		},
		"user_headers_lose_to_router_keys": func(ev *cdc.Event) {
			ev.Headers = []byte(`{"aggregate_id":"forged","commit_lsn":1,"x-backfill":true,"keep":"me"}`)
		},
	}
	for name, edit := range cases {
		t.Run(name, func(t *testing.T) {
			ev := messagetest.NativeEvent()
			edit(&ev)
			if err := Check(ev); err != nil {
				t.Fatalf("Check: %v", err)
			}
			key, msg := Unchecked(ev)
			if err := msg.Headers.Validate(); err != nil {
				t.Fatalf("headers do not validate: %v", err)
			}
			got := describe(key, msg)
			path := filepath.Join("testdata", name+".golden")
			if *update {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test ./route/message -run TestMessageGolden -update)", err)
			}
			if got != string(want) {
				t.Errorf("message differs from %s (rerun with -update if intended):\ngot:\n%s\nwant:\n%s", path, got, want)
			}
		})
	}
}

func TestMessageBodyUnchanged(t *testing.T) {
	ev := messagetest.NativeEvent()
	ev.Payload = []byte("{ \"spaces\" :  true }")
	_, msg := Unchecked(ev)
	if string(msg.Body) != string(ev.Payload) {
		t.Fatalf("body = %q, want the payload unchanged", msg.Body)
	}
}

func TestUserHeaders(t *testing.T) {
	tests := []struct {
		in      string
		want    amqp.Table
		wantErr bool
	}{
		{in: "", want: nil},
		{in: "  \n", want: nil},
		{in: "{}", want: amqp.Table{}},
		{in: " {} \n", want: amqp.Table{}},
		{in: "{ }", want: amqp.Table{}},
		{in: "{}}", wantErr: true},
		{in: "{}{}", wantErr: true},
		{in: `{"s":"x"}`, want: amqp.Table{"s": "x"}},
		{in: `{"i":42}`, want: amqp.Table{"i": int64(42)}},
		{in: `{"i":-0}`, want: amqp.Table{"i": int64(0)}},
		{in: `{"max":9223372036854775807}`, want: amqp.Table{"max": int64(math.MaxInt64)}},
		{in: `{"over":9223372036854775808}`, want: amqp.Table{"over": float64(9223372036854775808)}},
		{in: `{"f":1.0}`, want: amqp.Table{"f": 1.0}},
		{in: `{"e":1e3}`, want: amqp.Table{"e": 1000.0}},
		{in: `{"huge":1e400}`, want: amqp.Table{"huge": "1e400"}},
		{in: `{"t":true,"f":false}`, want: amqp.Table{"t": true, "f": false}},
		{in: `{"n":null}`, want: amqp.Table{}},
		{in: `{"o":{"a": [1, {"b": null}]}}`, want: amqp.Table{"o": `{"a":[1,{"b":null}]}`}},
		{in: `{"a":[ ]}`, want: amqp.Table{"a": `[]`}},
		{in: `{"d":1,"d":2}`, want: amqp.Table{"d": int64(2)}},
		{in: `{"u":"\u00e9\n"}`, want: amqp.Table{"u": "é\n"}},
		{in: `[]`, wantErr: true},
		{in: `null`, wantErr: true},
		{in: `"x"`, wantErr: true},
		{in: `{"a":1} {}`, wantErr: true},
		{in: `{"a":1}x`, wantErr: true},
		{in: `{"a":`, wantErr: true},
	}
	for _, tt := range tests {
		got, err := userHeaders([]byte(tt.in))
		if (err != nil) != tt.wantErr {
			t.Errorf("userHeaders(%q) error = %v, want error %v", tt.in, err, tt.wantErr)
			continue
		}
		if !tt.wantErr && !reflect.DeepEqual(got, tt.want) {
			t.Errorf("userHeaders(%q) = %#v, want %#v", tt.in, got, tt.want)
		}
	}
}

func TestCheck(t *testing.T) {
	long := strings.Repeat("x", 256)
	tests := []struct {
		name string
		edit func(*cdc.Event)
		ok   bool
	}{
		{"valid", func(*cdc.Event) {}, true},
		{"routing key of 255 bytes", func(ev *cdc.Event) { ev.AggregateType, ev.EventType = long[:127], long[:127] }, true},
		{"routing key of 256 bytes", func(ev *cdc.Event) { ev.AggregateType, ev.EventType = long[:128], long[:127] }, false},
		{"message id of 255 bytes", func(ev *cdc.Event) { ev.ID = long[:255] }, true},
		{"message id of 256 bytes", func(ev *cdc.Event) { ev.ID = long }, false},
		{"empty message id", func(ev *cdc.Event) { ev.ID = "" }, false},
		{"header key of 255 bytes", func(ev *cdc.Event) { ev.Headers = []byte(`{"` + long[:255] + `":1}`) }, true},
		{"header key of 256 bytes", func(ev *cdc.Event) { ev.Headers = []byte(`{"` + long + `":1}`) }, false},
		{"headers an array", func(ev *cdc.Event) { ev.Headers = []byte(`[1]`) }, false},
		{"headers not JSON", func(ev *cdc.Event) { ev.Headers = []byte(`{oops}`) }, false},
		{"headers empty", func(ev *cdc.Event) { ev.Headers = nil }, true},
	}
	for _, tt := range tests {
		ev := messagetest.NativeEvent()
		tt.edit(&ev)
		err := Check(ev)
		if (err == nil) != tt.ok {
			t.Errorf("%s: Check = %v, want ok=%v", tt.name, err, tt.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalidEvent) {
			t.Errorf("%s: Check = %v, want it to match ErrInvalidEvent", tt.name, err)
		}
	}
}

func FuzzHeaders(f *testing.F) {
	for _, s := range []string{``, `{}`, `{"a":1}`, `{"a":"b","c":[1,2],"d":{"e":null}}`, `{"x":1e400}`,
		`{"y":-9223372036854775809}`, `{"z":true,"w":false}`, `[]`, `null`, `{"a":1}{`, "{\"\xff\":1}",
		`{"CC":"x"}`, `{"BCC":["a"]}`, `{"cc":["a"]}`, `{"x-death":1}`, `{"x-amqp-1.0-footer":""}`, `{"":""}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		ev := messagetest.NativeEvent()
		ev.Headers = raw
		h, err := userHeaders(raw)
		if err == nil {
			if verr := h.Validate(); verr != nil {
				t.Fatalf("userHeaders(%q) = %#v does not validate: %v", raw, h, verr)
			}
		}
		key, msg := Unchecked(ev) // must not panic, even for headers that fail Check
		if err := msg.Headers.Validate(); err != nil {
			t.Fatalf("message headers do not validate: %v", err)
		}
		if key != "order.created" || msg.Headers[HeaderAggregateID] != "42" {
			t.Fatalf("router keys lost: %q %#v", key, msg.Headers)
		}
		if _, _, err := Build(ev); (err == nil) != (Check(ev) == nil) {
			t.Fatalf("build and Check disagree: %v", err)
		}
		if Check(ev) == nil {
			for k, v := range msg.Headers {
				if len(k) > maxShortString {
					t.Fatalf("Check passed a header key of %d bytes", len(k))
				}
				if _, reserved := reservedHeader(k); reserved {
					t.Fatalf("Check passed the reserved header %q", k)
				}
				switch v.(type) {
				case string, int64, int32, float64, bool:
				default:
					t.Fatalf("header %q has a value of type %T, which RabbitMQ may refuse", k, v)
				}
			}
			if _, err := CheckFrame(msg, 0); err != nil && !errors.Is(err, ErrInvalidEvent) {
				t.Fatalf("checkFrame = %v, want nil or ErrInvalidEvent", err)
			}
		}
	})
}

// BenchmarkMessageDefaultHeaders: the headers column's default ({}), most rows' case.
func BenchmarkMessageDefaultHeaders(b *testing.B) {
	ev := messagetest.NativeEvent()
	ev.Headers = []byte(`{}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := Build(ev); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkMessage(b *testing.B) {
	ev := messagetest.NativeEvent()
	ev.Headers = []byte(`{"trace_id":"4bf92f3577b34da6a3ce929d0e0e4736","tenant":17,"sampled":true,"ctx":{"region":"eu"}}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := Build(ev); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCheckAndBuild is the route work of one streamed event: the decoder's Check, then Publish's
// build, with the column's default headers and with four user headers.
func BenchmarkCheckAndBuild(b *testing.B) {
	for _, h := range []string{`{}`, `{"trace_id":"4bf92f3577b34da6a3ce929d0e0e4736","tenant":17,"sampled":true,"ctx":{"region":"eu"}}`} {
		name := "default"
		if h != `{}` {
			name = "user"
		}
		b.Run(name, func(b *testing.B) {
			ev := messagetest.NativeEvent()
			ev.Headers = []byte(h)
			b.ReportAllocs()
			for b.Loop() {
				if err := Check(ev); err != nil {
					b.Fatal(err)
				}
				if _, _, err := Build(ev); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// A row cannot make its event look backfilled or replayed: the origin headers in its own headers (the
// headers column, a mapping's JSON headers or placements) are dropped, and only the router sets them.
func TestOriginHeadersAreTheRoutersOnly(t *testing.T) {
	forged := `{"x-replayed": true, "x-quarantine-id": 5, "x-replayed-from-quarantine": 1, "x-backfill": true, "keep": "me"}`
	at := time.Unix(1700000000, 0)
	for _, c := range []struct {
		name string
		ev   cdc.Event
		want amqp.Table // the origin headers present, with their values
	}{
		{"a streamed row", cdc.Event{ID: "1", AggregateType: "a", EventType: "e", Headers: []byte(forged)}, amqp.Table{}},
		{"a backfilled row", cdc.Event{ID: "1", AggregateType: "a", EventType: "e", Headers: []byte(forged), Backfill: true},
			amqp.Table{HeaderBackfill: true}},
		{"a replayed row", cdc.Event{ID: "1", AggregateType: "a", EventType: "e", Headers: []byte(forged),
			Replayed: &cdc.Replayed{RecordID: 9, QuarantinedAt: at}},
			amqp.Table{HeaderReplayed: true, HeaderQuarantineID: int64(9), HeaderReplayedFrom: at.UnixMilli()}},
		{"a mapped row", cdc.Event{ID: "1", Mapped: &cdc.Mapped{RoutingKey: "k", JSONHeaders: []byte(forged),
			Headers: []cdc.Header{{Name: HeaderReplayed, Value: true}, {Name: HeaderQuarantineID, Value: int64(3)}}}}, amqp.Table{}},
		{"a replayed mapped row", cdc.Event{ID: "1", Mapped: &cdc.Mapped{RoutingKey: "k", JSONHeaders: []byte(forged)},
			Replayed: &cdc.Replayed{RecordID: 9, QuarantinedAt: at}},
			amqp.Table{HeaderReplayed: true, HeaderQuarantineID: int64(9), HeaderReplayedFrom: at.UnixMilli()}},
	} {
		_, msg, err := Build(c.ev)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		for _, k := range OriginHeaders() {
			if got, want := msg.Headers[k], c.want[k]; got != want {
				t.Errorf("%s: header %s = %#v, want %#v", c.name, k, got, want)
			}
		}
		if msg.Headers["keep"] != "me" {
			t.Errorf("%s: the row's own header keep was dropped: %v", c.name, msg.Headers)
		}
	}
}
