package runner

import (
	"errors"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/cdc-router/cdc-router/inbox"
)

func routerDelivery(version any) amqp.Delivery {
	return amqp.Delivery{
		MessageId: "0b6f2a4e-8f3c-4d2a-9a57-0c1e5d9f7a10", Type: "OrderPaid", ContentType: "application/json",
		Body: []byte(`{"amount":10}`),
		Headers: amqp.Table{"aggregate_type": "order", "aggregate_id": "42", "aggregate_version": version,
			"schema_version": int32(2), "commit_lsn": "0/16B3748", "tenant": "acme", "retries": int16(3)},
	}
}

func TestDecodeDeliveryVersionTypes(t *testing.T) {
	for _, tc := range []struct {
		name    string
		version any
		want    int64
	}{
		{"int8", int8(7), 7}, {"int16", int16(7), 7}, {"int32", int32(7), 7}, {"int64", int64(1) << 40, 1 << 40},
		{"int", 7, 7}, {"uint8", uint8(7), 7}, {"uint16", uint16(7), 7}, {"uint32", uint32(7), 7},
		{"uint64", uint64(7), 7}, {"string", "7", 7}, {"padded string", " 7 ", 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev, err := DecodeDelivery(routerDelivery(tc.version))
			if err != nil {
				t.Fatal(err)
			}
			if ev.AggregateVersion != tc.want {
				t.Fatalf("AggregateVersion = %d, want %d", ev.AggregateVersion, tc.want)
			}
		})
	}
}

func TestDecodeDeliveryFields(t *testing.T) {
	d := routerDelivery(int64(3))
	d.Headers["x-backfill"] = true
	ev, err := DecodeDelivery(d)
	if err != nil {
		t.Fatal(err)
	}
	want := inbox.Event{ID: d.MessageId, AggregateType: "order", AggregateID: "42", AggregateVersion: 3, Type: "OrderPaid",
		SchemaVersion: 2, CommitLSN: 0x16B3748, Backfill: true, Payload: d.Body}
	got := ev
	got.Headers = nil
	if got.ID != want.ID || got.AggregateType != want.AggregateType || got.AggregateID != want.AggregateID ||
		got.AggregateVersion != want.AggregateVersion || got.Type != want.Type || got.SchemaVersion != want.SchemaVersion ||
		got.CommitLSN != want.CommitLSN || got.Backfill != want.Backfill || string(got.Payload) != string(want.Payload) {
		t.Fatalf("DecodeDelivery = %+v, want %+v", got, want)
	}
	if ev.Headers["tenant"] != "acme" || ev.Headers["retries"] != "3" || len(ev.Headers) != 2 {
		t.Fatalf("user headers = %v, want tenant=acme retries=3 only", ev.Headers)
	}
}

func TestDecodeDeliveryMalformed(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(d *amqp.Delivery)
	}{
		{"no message id", func(d *amqp.Delivery) { d.MessageId = "" }},
		{"no aggregate id", func(d *amqp.Delivery) { delete(d.Headers, "aggregate_id") }},
		{"no version", func(d *amqp.Delivery) { delete(d.Headers, "aggregate_version") }},
		{"zero version", func(d *amqp.Delivery) { d.Headers["aggregate_version"] = int32(0) }},
		{"float version", func(d *amqp.Delivery) { d.Headers["aggregate_version"] = 1.5 }},
		{"word version", func(d *amqp.Delivery) { d.Headers["aggregate_version"] = "seven" }},
		{"schema version too big", func(d *amqp.Delivery) { d.Headers["schema_version"] = int64(1) << 40 }},
		{"bad lsn", func(d *amqp.Delivery) { d.Headers["commit_lsn"] = "16B3748" }},
		{"numeric aggregate type", func(d *amqp.Delivery) { d.Headers["aggregate_type"] = int32(1) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := routerDelivery(int64(1))
			tc.change(&d)
			if _, err := DecodeDelivery(d); !errors.Is(err, inbox.ErrMalformed) {
				t.Fatalf("DecodeDelivery error = %v, want ErrMalformed", err)
			}
		})
	}
}

func TestFingerprintIgnoresTransport(t *testing.T) {
	a := inbox.Event{ID: "e", AggregateType: "order", AggregateID: "42", AggregateVersion: 1, Type: "T", SchemaVersion: 1,
		Payload: []byte(`{"a":1}`)}
	b := a
	b.CommitLSN, b.Backfill, b.Headers, b.ID = 99, true, map[string]string{"x": "y"}, "other"
	if string(a.Fingerprint()) != string(b.Fingerprint()) {
		t.Fatal("fingerprint depends on transport fields")
	}
	for _, change := range []func(e *inbox.Event){
		func(e *inbox.Event) { e.Payload = []byte(`{"a":2}`) }, func(e *inbox.Event) { e.AggregateVersion = 2 },
		func(e *inbox.Event) { e.Type = "U" }, func(e *inbox.Event) { e.SchemaVersion = 2 },
		func(e *inbox.Event) { e.AggregateType, e.AggregateID = "order4", "2" },
	} {
		c := a
		change(&c)
		if string(a.Fingerprint()) == string(c.Fingerprint()) {
			t.Errorf("fingerprint unchanged by a content change: %+v", c)
		}
	}
}

func TestDecodeDeliveryFullState(t *testing.T) {
	for _, tc := range []struct {
		name      string
		header    any
		want      bool
		malformed bool
	}{
		{"absent", nil, false, false}, {"bool true", true, true, false}, {"bool false", false, false, false},
		{"string true", "true", true, false}, {"string false", "false", false, false}, {"not a boolean", "yes", false, true},
		{"an integer", int64(1), false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := routerDelivery(int64(3))
			if tc.header != nil {
				d.Headers["full_state"] = tc.header
			}
			ev, err := DecodeDelivery(d)
			if got := errors.Is(err, inbox.ErrMalformed); got != tc.malformed {
				t.Fatalf("DecodeDelivery error %v, want malformed %v", err, tc.malformed)
			}
			if ev.FullState != tc.want {
				t.Fatalf("FullState = %v, want %v", ev.FullState, tc.want)
			}
			if _, ok := ev.Headers["full_state"]; ok {
				t.Fatal("full_state copied into the user headers")
			}
		})
	}
}
