package message

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/cdc-router/cdc-router/route/message/messagetest"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/cdc-router/cdc-router/internal/cdc"
)

// A mapped event's message: properties from the mapping, typed headers in order (a later one of the same
// name wins), commit_lsn, the aggregate's bucket (of the routing value and the key), and none of the native
// aggregate headers.
func TestMappedMessage(t *testing.T) {
	ev := messagetest.MappedEvent()
	key, msg, err := Build(ev)
	if err != nil {
		t.Fatal(err)
	}
	want := amqp.Publishing{ContentType: "application/json", DeliveryMode: amqp.Persistent, MessageId: "42",
		Timestamp: ev.OccurredAt, Type: "OrderCreated", Body: []byte(`{"a":1}`),
		Headers: amqp.Table{"id": "placed", "key": "o-1", "timestamp_in_ms": ev.OccurredAt.UnixMilli(), "raw": []byte{0, 1},
			"commit_lsn": "1/10", "aggregate_bucket": int32(34)}}
	if key != "outbox.event.Order" || !reflect.DeepEqual(msg, want) {
		t.Errorf("got %q %+v\nwant %+v", key, msg, want)
	}
	if err := msg.Headers.Validate(); err != nil {
		t.Errorf("headers do not encode: %v", err)
	}
	ev.Mapped.ContentEncoding, ev.Mapped.CorrelationID, ev.Mapped.ReplyTo, ev.Mapped.AppID = "gzip", "corr-1", "replies", "billing"
	if _, msg, _ = Build(ev); msg.ContentEncoding != "gzip" || msg.CorrelationId != "corr-1" || msg.ReplyTo != "replies" || msg.AppId != "billing" {
		t.Errorf("row properties: %+v", msg)
	}
	ev.Mapped.JSONHeaders = []byte(`{"PARTITION_ID": "o-9", "n": 2, "big": 1e400, "obj": {"a": [1]}, "gone": null, "id": "from-json"}`)
	_, msg, err = Build(ev)
	if err != nil || msg.Headers["PARTITION_ID"] != "o-9" || msg.Headers["n"] != int64(2) || msg.Headers["obj"] != `{"a":[1]}` ||
		msg.Headers["big"] != "1e400" || msg.Headers["id"] != "placed" || msg.Headers["key"] != "o-1" {
		t.Errorf("amqp.headers.json: %v %v", err, msg.Headers)
	}
	if _, ok := msg.Headers["gone"]; ok {
		t.Errorf("a JSON null became header gone")
	}
	ev.Mapped.JSONHeaders = nil
	ev.Mapped.Tombstone, ev.Payload, ev.Backfill = true, nil, true
	_, msg, _ = Build(ev)
	if msg.Headers["tombstone"] != true || len(msg.Body) != 0 || msg.Headers["x-backfill"] != true {
		t.Errorf("tombstone message %+v", msg)
	}
}

func TestCheckMapped(t *testing.T) {
	tests := []struct {
		change func(ev *cdc.Event)
		want   string
	}{
		{func(ev *cdc.Event) { ev.Mapped.RoutingKey = strings.Repeat("k", 256) }, "route.by.field through route.topic.replacement) is 256 bytes"},
		{func(ev *cdc.Event) { ev.ID = "" }, "the event id (table.field.event.id, the message id) is empty"},
		{func(ev *cdc.Event) { ev.ID = strings.Repeat("i", 256) }, "is 256 bytes, AMQP allows 255"},
		{func(ev *cdc.Event) { ev.EventType = strings.Repeat("t", 256) }, "the type (table.field.event.type) is 256 bytes"},
		{func(ev *cdc.Event) { ev.Mapped.ReplyTo = strings.Repeat("r", 256) }, "the reply_to property (amqp.property.reply_to) is 256 bytes"},
		{func(ev *cdc.Event) { ev.Mapped.JSONHeaders = []byte(`{"x-death": []}`) }, `header name "x-death" of the amqp.headers.json column is reserved by RabbitMQ`},
		{func(ev *cdc.Event) { ev.Mapped.JSONHeaders = []byte(`{"` + strings.Repeat("h", 256) + `": 1}`) }, "of the amqp.headers.json column is 256 bytes"},
		{func(ev *cdc.Event) {
			ev.Mapped.Headers = append(ev.Mapped.Headers, cdc.Header{Name: "BCC", Value: "x"})
		}, `header name "BCC" is reserved`},
	}
	for _, tt := range tests {
		ev := messagetest.MappedEvent()
		tt.change(&ev)
		err := Check(ev)
		if !errors.Is(err, ErrInvalidEvent) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Check = %v, want %q", err, tt.want)
		}
	}
	if err := Check(messagetest.MappedEvent()); err != nil {
		t.Errorf("Check of a valid mapped event: %v", err)
	}
}

// The byte arrays (bytea id and key) and int16 values (int2 columns) a mapping puts in headers are sized as
// amqp091 writes them: 'x' + long length + bytes, 's' + 2 bytes; so such an event passes the frame check.
func TestMappedHeaderTypesFitTheFrameCheck(t *testing.T) {
	n, _, err := tableSize(amqp.Table{"k": []byte{1, 2, 3}, "s": int16(5)})
	if want := 4 + (1 + 1 + 1 + 4 + 3) + (1 + 1 + 1 + 2); err != nil || n != want {
		t.Errorf("tableSize = %d, %v; want %d", n, err, want)
	}
	ev := messagetest.MappedEvent()
	ev.Mapped.Headers = append(ev.Mapped.Headers, cdc.Header{Name: "key", Value: []byte{0, 0xff}}, cdc.Header{Name: "n", Value: int16(2)})
	_, msg, err := Build(ev)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := CheckFrame(msg, 0); err != nil {
		t.Errorf("checkFrame of bytea and int2 headers: %v", err)
	}
}
