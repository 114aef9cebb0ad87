package decode

import (
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/cdc-router/cdc-router/internal/cdc"
)

func ptr(s string) *string { return &s }

// goodRow is a valid outbox row as SELECTed text.
func goodRow() map[string]*string {
	return map[string]*string{
		"id": ptr(id1), "aggregate_type": ptr("order"), "aggregate_id": ptr("o-1"),
		"aggregate_version": ptr("42"), "event_type": ptr("OrderPlaced"), "schema_version": ptr("1"),
		"payload": ptr(`{"b": 2, "a": [1, 2.50]}`), "headers": ptr(`{"trace": "abc"}`),
		"occurred_at": ptr("2024-01-02 03:04:05.123456+00"),
	}
}

func goodEvent() cdc.Event {
	return cdc.Event{ID: id1, AggregateType: "order", AggregateID: "o-1", AggregateVersion: 42,
		EventType: "OrderPlaced", SchemaVersion: 1, Payload: []byte(`{"b": 2, "a": [1, 2.50]}`),
		Headers: []byte(`{"trace": "abc"}`), OccurredAt: time.Date(2024, 1, 2, 3, 4, 5, 123456000, time.UTC)}
}

func TestMapRow(t *testing.T) {
	errCheck := errors.New("event type OrderPlaced is not routable")
	tests := []struct {
		name   string
		cfg    Config
		change map[string]*string // merged into goodRow; a key with value nilKey is deleted
		del    []string
		want   func(*cdc.Event) // applied to goodEvent for a success
		reason string
	}{
		{name: "happy path"},
		{name: "extra columns are ignored", change: map[string]*string{"extra": ptr("x"), "sent_at": nil}},
		{name: "headers absent is empty", del: []string{"headers"}, want: func(e *cdc.Event) { e.Headers = nil }},
		{name: "headers NULL is empty", change: map[string]*string{"headers": nil}, want: func(e *cdc.Event) { e.Headers = nil }},
		{name: "headers empty object", change: map[string]*string{"headers": ptr(" {}")}, want: func(e *cdc.Event) { e.Headers = []byte(" {}") }},
		{name: "occurred_at without fraction, half-hour offset",
			change: map[string]*string{"occurred_at": ptr("2024-01-02 03:04:05+05:30")},
			want:   func(e *cdc.Event) { e.OccurredAt = time.Date(2024, 1, 1, 21, 34, 5, 0, time.UTC) }},
		{name: "occurred_at with a seconds offset",
			change: map[string]*string{"occurred_at": ptr("1890-01-02 03:04:05-00:09:21")},
			want:   func(e *cdc.Event) { e.OccurredAt = time.Date(1890, 1, 2, 3, 13, 26, 0, time.UTC) }},
		{name: "negative and extreme integers",
			change: map[string]*string{"aggregate_version": ptr("-9223372036854775808"), "schema_version": ptr("2147483647")},
			want:   func(e *cdc.Event) { e.AggregateVersion = -9223372036854775808; e.SchemaVersion = 2147483647 }},
		{name: "payload at the limit", cfg: Config{MaxPayloadBytes: 24}},
		{name: "payload JSON scalar", change: map[string]*string{"payload": ptr(`"x"`)}, want: func(e *cdc.Event) { e.Payload = []byte(`"x"`) }},
		{name: "upper-case uuid", change: map[string]*string{"id": ptr(strings.ToUpper(id1))}, want: func(e *cdc.Event) { e.ID = strings.ToUpper(id1) }},

		{name: "missing id", del: []string{"id"}, reason: "column id is missing"},
		{name: "missing event_type", del: []string{"event_type"}, reason: "column event_type is missing"},
		{name: "missing schema_version", del: []string{"schema_version"}, reason: "column schema_version is missing"},
		{name: "missing occurred_at", del: []string{"occurred_at"}, reason: "column occurred_at is missing"},
		{name: "NULL id", change: map[string]*string{"id": nil}, reason: "column id is NULL"},
		{name: "NULL aggregate_type", change: map[string]*string{"aggregate_type": nil}, reason: "column aggregate_type is NULL"},
		{name: "NULL aggregate_id", change: map[string]*string{"aggregate_id": nil}, reason: "column aggregate_id is NULL"},
		{name: "NULL payload", change: map[string]*string{"payload": nil}, reason: "column payload is NULL"},
		{name: "bad uuid", change: map[string]*string{"id": ptr("not-a-uuid")}, reason: `id "not-a-uuid" is not a uuid`},
		{name: "uuid with a bad digit", change: map[string]*string{"id": ptr("g0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11")}, reason: `id "g0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11" is not a uuid`},
		{name: "non-integer version", change: map[string]*string{"aggregate_version": ptr("abc")}, reason: `aggregate_version "abc" is not an integer`},
		{name: "empty version", change: map[string]*string{"aggregate_version": ptr("")}, reason: `aggregate_version "" is not an integer`},
		{name: "version over int64", change: map[string]*string{"aggregate_version": ptr("9223372036854775808")}, reason: `aggregate_version "9223372036854775808" is out of the int64 range`},
		{name: "schema_version over int32", change: map[string]*string{"schema_version": ptr("2147483648")}, reason: `schema_version "2147483648" is out of the int32 range`},
		{name: "schema_version under int32", change: map[string]*string{"schema_version": ptr("-2147483649")}, reason: `schema_version "-2147483649" is out of the int32 range`},
		{name: "schema_version decimal", change: map[string]*string{"schema_version": ptr("1.0")}, reason: `schema_version "1.0" is not an integer`},
		{name: "invalid payload JSON", change: map[string]*string{"payload": ptr(`{"a":`)}, reason: "payload is not valid JSON"},
		{name: "payload over the limit", cfg: Config{MaxPayloadBytes: 23}, reason: "payload is 24 bytes, over the 23-byte limit (--max-payload-bytes)"},
		{name: "payload over the limit is refused by its length, not parsed", cfg: Config{MaxPayloadBytes: 3},
			change: map[string]*string{"payload": ptr(`{"a":`), "id": ptr("not-a-uuid")}, reason: "payload is 5 bytes, over the 3-byte limit"},
		{name: "another column over its limit", change: map[string]*string{"headers": ptr(`{"a":"` + strings.Repeat("x", 8<<20) + `"}`)},
			reason: "headers is 8388616 bytes, over the 8388608-byte limit of a column other than the payload"},
		{name: "headers array", change: map[string]*string{"headers": ptr("[1,2]")}, reason: "headers is not a JSON object"},
		{name: "headers string", change: map[string]*string{"headers": ptr(`"{}"`)}, reason: "headers is not a JSON object"},
		{name: "headers empty text", change: map[string]*string{"headers": ptr("")}, reason: "headers is not a JSON object"},
		{name: "headers two objects", change: map[string]*string{"headers": ptr("{} {}")}, reason: "headers is not a JSON object"},
		{name: "occurred_at garbage", change: map[string]*string{"occurred_at": ptr("yesterday")}, reason: `occurred_at "yesterday" is not a timestamptz like 2006-01-02 15:04:05.999999+00`},
		{name: "occurred_at infinity", change: map[string]*string{"occurred_at": ptr("infinity")}, reason: `occurred_at "infinity" is not a timestamptz`},
		{name: "occurred_at BC", change: map[string]*string{"occurred_at": ptr("0044-03-15 12:00:00+00 BC")}, reason: `occurred_at "0044-03-15 12:00:00+00 BC" is not a timestamptz`},
		{name: "occurred_at without offset", change: map[string]*string{"occurred_at": ptr("2024-01-02 03:04:05")}, reason: `occurred_at "2024-01-02 03:04:05" is not a timestamptz`},
		{name: "occurred_at SQL DateStyle", change: map[string]*string{"occurred_at": ptr("01/02/2024 03:04:05.123456 UTC")}, reason: `occurred_at "01/02/2024 03:04:05.123456 UTC" is not a timestamptz`},
		{name: "long values are cut in the reason", change: map[string]*string{"aggregate_version": ptr(strings.Repeat("9", 100) + "x")},
			reason: `aggregate_version "` + strings.Repeat("9", 64) + `"… is not an integer`},
		{name: "Check error", cfg: Config{Check: func(cdc.Event) error { return errCheck }}, reason: errCheck.Error()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			row := goodRow()
			maps.Copy(row, tt.change)
			for _, k := range tt.del {
				delete(row, k)
			}
			got, err := MapRow(tt.cfg, row)
			if tt.reason != "" {
				var re *RowError
				if !errors.As(err, &re) || !strings.HasPrefix(re.Reason, tt.reason) {
					t.Fatalf("error = %v, want a *RowError with reason %q", err, tt.reason)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := goodEvent()
			if tt.want != nil {
				tt.want(&want)
			}
			if !eventsEqual(got, want) {
				t.Errorf("event\n got %+v\nwant %+v", got, want)
			}
		})
	}
}

func TestMapRowCheckSeesTheEventAndIsUnwrapped(t *testing.T) {
	errCheck := errors.New("too big for AMQP")
	var seen cdc.Event
	_, err := MapRow(Config{Check: func(ev cdc.Event) error { seen = ev; return errCheck }}, goodRow())
	if !errors.Is(err, errCheck) {
		t.Errorf("error = %v, want it to wrap the Check error", err)
	}
	if !eventsEqual(seen, goodEvent()) {
		t.Errorf("Check saw %+v", seen)
	}
}

func TestMapRowDoesNotAliasValues(t *testing.T) {
	row := goodRow()
	ev, err := MapRow(Config{}, row)
	if err != nil {
		t.Fatal(err)
	}
	*row["payload"] = "changed"
	if string(ev.Payload) != string(goodEvent().Payload) {
		t.Errorf("payload changed with the input: %s", ev.Payload)
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		cfg     Config
		wantErr string
	}{
		{cfg: Config{}},
		{cfg: Config{Table: "app.outbox", MaxPayloadBytes: 1}},
		{cfg: Config{Table: "outbox"}}, // public.outbox
		{cfg: Config{Table: ".outbox"}, wantErr: `table ".outbox" must be a table name`},
		{cfg: Config{Table: "public."}, wantErr: "must be a table name"},
		{cfg: Config{MaxPayloadBytes: -1}, wantErr: "must not be negative"},
	}
	for _, tt := range tests {
		err := tt.cfg.Validate()
		if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
			t.Errorf("Validate(%+v) = %v, want %q", tt.cfg, err, tt.wantErr)
		}
	}
	if c := (Config{}).withDefaults(); c.Table != DefaultTable || c.MaxPayloadBytes != 8<<20 {
		t.Errorf("defaults = %+v", c)
	}
}
