package outbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/outbox"
)

// row is an outbox row as the router reads it.
type row struct {
	ID, AggType, AggID, Type string
	Version                  int64
	SchemaVersion            int32
	Payload, Headers         string
	OccurredAt               time.Time
}

func (d db) row(t *testing.T, table, id string) row {
	t.Helper()
	var r row
	err := d.pool.QueryRow(d.ctx, `SELECT id::text, aggregate_type, aggregate_id, event_type, aggregate_version, schema_version,
		payload::text, headers::text, occurred_at FROM `+table+` WHERE id = $1`, id).
		Scan(&r.ID, &r.AggType, &r.AggID, &r.Type, &r.Version, &r.SchemaVersion, &r.Payload, &r.Headers, &r.OccurredAt)
	if err != nil {
		t.Fatalf("read outbox row %s: %v", id, err)
	}
	return r
}

// write runs one pgx transaction that writes evs and returns what each got.
func (d db) write(ctx context.Context, w outbox.Writer, evs ...outbox.Event) ([]outbox.Written, error) {
	var out []outbox.Written
	err := pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		for _, ev := range evs {
			got, err := w.Write(ctx, tx, ev)
			if err != nil {
				return err
			}
			out = append(out, got)
		}
		return nil
	})
	return out, err
}

func TestWriteStoresTheEventAsTheRouterReadsIt(t *testing.T) {
	d := newDB(t)
	at := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	got, err := d.write(d.ctx, outbox.Writer{}, outbox.Event{
		ID: "0b7e0f4e-6c3a-4e43-9d0c-3a4b2c1d0e0f", AggregateType: "order", AggregateID: "42", Type: "paid",
		SchemaVersion: 3, Payload: []byte(`{"amount": "16.06"}`), Headers: map[string]any{"full_state": true, "tenant": "acme"},
		OccurredAt: at,
	})
	if err != nil {
		t.Fatal(err)
	}
	r := d.row(t, "outbox", got[0].ID)
	want := row{ID: "0b7e0f4e-6c3a-4e43-9d0c-3a4b2c1d0e0f", AggType: "order", AggID: "42", Type: "paid", Version: 1,
		SchemaVersion: 3, Payload: `{"amount": "16.06"}`, Headers: `{"tenant": "acme", "full_state": true}`}
	r.OccurredAt, want.OccurredAt = r.OccurredAt.UTC(), at
	if r != want {
		t.Fatalf("row\n %+v\nwant\n %+v", r, want)
	}

	// Defaults: a new UUID, schema version 1, headers {}, occurred_at = now().
	before := time.Now().Add(-time.Minute)
	got, err = d.write(d.ctx, outbox.Writer{}, outbox.Event{AggregateType: "order", AggregateID: "42", Type: "shipped", Payload: []byte(`null`)})
	if err != nil {
		t.Fatal(err)
	}
	r = d.row(t, "outbox", got[0].ID)
	if r.Version != 2 || r.SchemaVersion != 1 || r.Headers != "{}" || len(r.ID) != 36 || r.OccurredAt.Before(before) {
		t.Fatalf("defaults: %+v", r)
	}
}

func TestWriteAssignsVersionsPerAggregateAndSeesItsOwnTransaction(t *testing.T) {
	d := newDB(t)
	ev := func(typ, id string) outbox.Event {
		return outbox.Event{AggregateType: typ, AggregateID: id, Type: "x", Payload: []byte(`{}`)}
	}
	got, err := d.write(d.ctx, outbox.Writer{}, ev("order", "1"), ev("order", "1"), ev("order", "2"), ev("invoice", "1"), ev("order", "1"))
	if err != nil {
		t.Fatal(err)
	}
	var vs []int64
	for _, g := range got {
		vs = append(vs, g.Version)
	}
	if want := []int64{1, 2, 1, 1, 3}; !equal(vs, want) {
		t.Fatalf("versions %v, want %v", vs, want)
	}
}

func equal(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// An explicit version (kept on the business row and moved by a conditional update) is written as given;
// one that is already taken is a conflict, as with the next version.
func TestWriteExplicitVersion(t *testing.T) {
	d := newDB(t)
	ev := outbox.Event{AggregateType: "order", AggregateID: "5", Version: 4, Type: "paid", Payload: []byte(`{}`)}
	if got, err := d.write(d.ctx, outbox.Writer{}, ev); err != nil || got[0].Version != 4 {
		t.Fatalf("%+v, %v; want version 4", got, err)
	}
	_, err := d.write(d.ctx, outbox.Writer{}, ev)
	if !errors.Is(err, outbox.ErrVersionConflict) || !strings.Contains(err.Error(), `version 4 of order "5"`) {
		t.Fatalf("version 4 again: %v; want ErrVersionConflict naming version 4", err)
	}
	if vs := d.versions(t, "order", "5"); !equal(vs, []int64{4}) {
		t.Fatalf("versions %v", vs)
	}
}

// Events the router would quarantine are refused before anything reaches PostgreSQL: the transaction
// stays usable and its other writes commit.
func TestWriteRefusesWhatTheRouterWouldQuarantine(t *testing.T) {
	d := newDB(t)
	good := outbox.Event{AggregateType: "order", AggregateID: "1", Type: "paid", Payload: []byte(`{}`)}
	for name, c := range map[string]struct {
		change func(*outbox.Event)
		want   string
	}{
		"no aggregate type": {func(e *outbox.Event) { e.AggregateType = "" }, "AggregateType is empty"},
		"no aggregate id":   {func(e *outbox.Event) { e.AggregateID = "" }, "AggregateID is empty"},
		"no type":           {func(e *outbox.Event) { e.Type = "" }, "Type is empty"},
		"payload not JSON":  {func(e *outbox.Event) { e.Payload = []byte(`{"a":`) }, "Payload is not a JSON value"},
		"no payload":        {func(e *outbox.Event) { e.Payload = nil }, "Payload is not a JSON value"},
		"id not a UUID":     {func(e *outbox.Event) { e.ID = "42" }, "is not a UUID"},
		"negative version":  {func(e *outbox.Event) { e.Version = -1 }, "negative"},
		"long routing key":  {func(e *outbox.Event) { e.Type = strings.Repeat("t", 250) }, "routing key"},
		"reserved header":   {func(e *outbox.Event) { e.Headers = map[string]any{"BCC": "x"} }, `"BCC" is reserved`},
		"amqp 1.0 header":   {func(e *outbox.Event) { e.Headers = map[string]any{"x-amqp-1.0-properties": "x"} }, "reserved"},
		"long header name":  {func(e *outbox.Event) { e.Headers = map[string]any{strings.Repeat("h", 256): 1} }, "256 bytes"},
		"header not JSON":   {func(e *outbox.Event) { e.Headers = map[string]any{"f": func() {}} }, "Headers"},
	} {
		t.Run(name, func(t *testing.T) {
			bad := good
			c.change(&bad)
			var refused error
			err := pgx.BeginFunc(d.ctx, d.pool, func(tx pgx.Tx) error {
				_, refused = outbox.Writer{}.Write(d.ctx, tx, bad)
				_, err := outbox.Writer{}.Write(d.ctx, tx, good) // the transaction is still usable
				return err
			})
			if err != nil {
				t.Fatalf("the transaction failed after the refusal: %v", err)
			}
			if !errors.Is(refused, outbox.ErrInvalidEvent) || !strings.Contains(refused.Error(), c.want) {
				t.Fatalf("refusal: %v; want ErrInvalidEvent saying %q", refused, c.want)
			}
		})
	}
}

// A reused id is the caller's mistake, not a conflict: retrying would fail forever.
func TestWriteReusedIDIsNotRetryable(t *testing.T) {
	d := newDB(t)
	ev := outbox.Event{ID: "0b7e0f4e-6c3a-4e43-9d0c-3a4b2c1d0e0f", AggregateType: "order", AggregateID: "1", Type: "paid", Payload: []byte(`{}`)}
	if _, err := d.write(d.ctx, outbox.Writer{}, ev); err != nil {
		t.Fatal(err)
	}
	ev.AggregateID = "2"
	_, err := d.write(d.ctx, outbox.Writer{}, ev)
	if err == nil || outbox.Retryable(err) || !strings.Contains(err.Error(), "is already in the outbox") {
		t.Fatalf("reused id: %v; want a non-retryable error naming the id", err)
	}
}

// The table is the router's --table; a missing table or a table without the unique key is named, with
// the fix, instead of PostgreSQL's bare words.
func TestWriteTableErrors(t *testing.T) {
	d := newDB(t)
	ev := outbox.Event{AggregateType: "order", AggregateID: "1", Type: "paid", Payload: []byte(`{}`)}
	if _, err := d.pool.Exec(d.ctx, `CREATE SCHEMA app; CREATE TABLE app."Events" (LIKE public.outbox INCLUDING ALL);
		CREATE TABLE app.nokey (LIKE public.outbox INCLUDING DEFAULTS)`); err != nil {
		t.Fatal(err)
	}
	got, err := d.write(d.ctx, outbox.Writer{Table: "app.Events"}, ev)
	if err != nil {
		t.Fatalf("app.Events: %v", err)
	}
	if r := d.row(t, `app."Events"`, got[0].ID); r.Version != 1 {
		t.Fatalf("app.Events row: %+v", r)
	}
	_, err = d.write(d.ctx, outbox.Writer{Table: "app.missing"}, ev)
	if err == nil || !strings.Contains(err.Error(), "table app.missing does not exist: run cdc-router migrate") {
		t.Fatalf("missing table: %v", err)
	}
	_, err = d.write(d.ctx, outbox.Writer{Table: "app.nokey"}, ev)
	if err == nil || !strings.Contains(err.Error(), "has no unique key on (aggregate_type, aggregate_id, aggregate_version)") {
		t.Fatalf("table without the key: %v", err)
	}
}

func TestWriteTakesTheTraceContext(t *testing.T) {
	d := newDB(t)
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	ev := outbox.Event{AggregateType: "order", AggregateID: "1", Type: "paid", Payload: []byte(`{}`)}
	headers := func(ctx context.Context, ev outbox.Event) map[string]any {
		t.Helper()
		got, err := d.write(ctx, outbox.Writer{}, ev)
		if err != nil {
			t.Fatal(err)
		}
		var h map[string]any
		if err := json.Unmarshal([]byte(d.row(t, "outbox", got[0].ID).Headers), &h); err != nil {
			t.Fatal(err)
		}
		return h
	}
	h := headers(outbox.WithTraceParent(d.ctx, tp, "congo=t61rcWkgMzE"), ev)
	if h["traceparent"] != tp || h["tracestate"] != "congo=t61rcWkgMzE" || len(h) != 2 {
		t.Fatalf("headers %v", h)
	}
	if h := headers(d.ctx, ev); len(h) != 0 {
		t.Fatalf("no trace context: headers %v", h)
	}
	// Not well-formed (upper-case hex): ignored with its tracestate, as the W3C specification asks.
	if h := headers(outbox.WithTraceParent(d.ctx, strings.ToUpper(tp), "a=b"), ev); len(h) != 0 {
		t.Fatalf("malformed traceparent: headers %v", h)
	}
	// The event's own traceparent wins, and the context's tracestate does not go with it.
	own := ev
	own.Headers = map[string]any{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00", "k": 1}
	h = headers(outbox.WithTraceParent(d.ctx, tp, "a=b"), own)
	if h["traceparent"] != own.Headers["traceparent"] || h["tracestate"] != nil || h["k"] != 1.0 {
		t.Fatalf("own traceparent: headers %v", h)
	}
}

func TestValidTraceParent(t *testing.T) {
	for s, want := range map[string]bool{
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01":      true,
		"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01":      true,
		"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what": true,  // a later version may add fields
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what": false, // version 00 may not
		"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01":      false,
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01":      false,
		"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01":      false,
		"00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01":      false,
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0":       false,
		"00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01":      false,
		"": false,
	} {
		if got := outbox.ValidTraceParent(s); got != want {
			t.Errorf("ValidTraceParent(%q) = %v, want %v", s, got, want)
		}
	}
}
