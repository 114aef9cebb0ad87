package route

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cdc-router/cdc-router/route/message/messagetest"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/cdc-router/cdc-router/internal/cdc"
	"github.com/cdc-router/cdc-router/route/message"
)

func TestCheckReservedAndShortStrings(t *testing.T) {
	long := strings.Repeat("k", 256)
	tests := []struct {
		headers string
		want    string // part of the reason; "" means accepted
	}{
		{`{"CC":"x"}`, `header name "CC" is reserved by RabbitMQ: it is RabbitMQ's sender-selected distribution`},
		{`{"CC":["other.key"]}`, `would route copies of the message to the routing keys it lists`},
		{`{"BCC":["a","b"]}`, `header name "BCC" is reserved`},
		{`{"BCC":null}`, ""}, // null headers are left out
		{`{"cc":"x","Cc":["y"],"bcc":1,"Bcc":true,"CC ":"x"," CC":"x"}`, ""}, // RabbitMQ matches CC and BCC exactly
		{`{"x-death":[{"count":1}]}`, `"x-death" is reserved by RabbitMQ: it is RabbitMQ's dead-lettering history`},
		{`{"x-first-death-reason":"rejected"}`, `dead-lettering history`},
		{`{"x-last-death-queue":"q"}`, `dead-lettering history`},
		{`{"x-amqp-1.0-properties":"junk"}`, `x-amqp-1.0-* headers`},
		{`{"x-amqp-1.0-footer":"junk"}`, `x-amqp-1.0-* headers`},
		{`{"x-delay":5000,"x-stream-filter-value":"eu","x-received-from":"x","x-match":"all","x-deliver-at":1}`, ""},
		{`{"X-Death":"not the broker's"}`, ""},
		{`{"` + long[:255] + `":1}`, ""},
		{`{"` + long + `":1}`, `header name "kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk"... is 256 bytes, AMQP allows 255`},
	}
	for _, tt := range tests {
		ev := messagetest.NativeEvent()
		ev.Headers = []byte(tt.headers)
		err := message.Check(ev)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("message.Check(%.60s) = %v, want nil", tt.headers, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("message.Check(%.60s) = %v, want a reason containing %q", tt.headers, err, tt.want)
		case err != nil && !errors.Is(err, cdc.ErrUnpublishable):
			t.Errorf("message.Check(%.60s) = %v, does not match cdc.ErrUnpublishable", tt.headers, err)
		}
	}
	ev := messagetest.NativeEvent()
	ev.AggregateType, ev.EventType = strings.Repeat("a", 200), strings.Repeat("e", 55)
	if err := message.Check(ev); err == nil || !strings.Contains(err.Error(), "is 256 bytes, AMQP allows 255: shorten aggregate_type or event_type") {
		t.Errorf("Check of a 256-byte routing key = %v", err)
	}
}

func TestCheckFrame(t *testing.T) {
	ev := messagetest.NativeEvent()
	_, msg, err := message.Build(ev)
	if err != nil {
		t.Fatal(err)
	}
	base, _, _ := message.ContentHeaderSize(msg)
	for _, tt := range []struct {
		frameMax int
		ok       bool
	}{
		{base + message.FrameOverhead, true},
		{base + message.FrameOverhead - 1, false},
		{0, true}, // no limit negotiated: RabbitMQ's default
	} {
		n, err := message.CheckFrame(msg, tt.frameMax)
		if (err == nil) != tt.ok {
			t.Errorf("checkFrame with frame_max %d = %d, %v; want ok=%v", tt.frameMax, n, err, tt.ok)
		}
		if err == nil && n != base+message.FrameOverhead {
			t.Errorf("checkFrame = %d, want %d", n, base+message.FrameOverhead)
		}
		if err != nil && !errors.Is(err, ErrInvalidEvent) {
			t.Errorf("checkFrame error %v does not match ErrInvalidEvent", err)
		}
	}
	// A 200 KB aggregate_id and 10,000 headers: both far over the default frame_max, each named.
	ev.AggregateID = strings.Repeat("i", 200_000)
	_, msg, _ = message.Build(ev)
	if _, err := message.CheckFrame(msg, 0); err == nil || !strings.Contains(err.Error(), `(6 headers; the largest, "aggregate_id", takes 200,018 bytes)`) {
		t.Errorf("checkFrame of a 200 KB aggregate_id = %v", err)
	}
	var h strings.Builder
	h.WriteString("{")
	for i := range 10000 {
		if i > 0 {
			h.WriteString(",")
		}
		fmt.Fprintf(&h, `"header_%04d":"value"`, i)
	}
	h.WriteString("}")
	ev = messagetest.NativeEvent()
	ev.Headers = []byte(h.String())
	_, msg, _ = message.Build(ev)
	if _, err := message.CheckFrame(msg, 0); err == nil || !strings.Contains(err.Error(), "over the broker's frame_max of 131,072") ||
		!strings.Contains(err.Error(), "(10,006 headers;") {
		t.Errorf("checkFrame of 10,000 headers (%d bytes of JSON) = %v", h.Len(), err)
	} else {
		t.Logf("10,000 headers: %v", err)
	}
	// Value types the mapping never produces are refused rather than sent.
	msg.Headers = amqp.Table{"a": []any{"x"}}
	if _, err := message.CheckFrame(msg, 0); err == nil || !strings.Contains(err.Error(), "[]interface {}") {
		t.Errorf("checkFrame of an array value = %v, want a refusal naming the type", err)
	}
}

func TestThousands(t *testing.T) {
	for n, want := range map[int]string{0: "0", 7: "7", 999: "999", 1000: "1,000", 131072: "131,072", 180345: "180,345",
		1234567: "1,234,567", -4096: "-4,096"} {
		if got := message.Thousands(n); got != want {
			t.Errorf("message.Thousands(%d) = %q, want %q", n, got, want)
		}
	}
}

// TestSenderSelectedDistributionIsCaseSensitive shows, on the broker and without the Router, why CC and
// BCC are refused and why only those exact names are: an array of strings under "CC" routes a copy to the
// listed key, the same array under "cc" or "Cc" does nothing.
func TestSenderSelectedDistributionIsCaseSensitive(t *testing.T) {
	b := newBroker(t)
	b.dial(b.config("")) // declares the exchange
	q := b.queue("elsewhere.key", nil)
	ch, _, _ := recordingDial(t, b.url)
	for i, name := range []string{"cc", "Cc", "bcc", "CC"} {
		dc, err := ch.PublishWithDeferredConfirm(b.exchange, "some.key", false, false, amqp.Publishing{
			MessageId: name, Headers: amqp.Table{name: []any{"elsewhere.key"}}})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		ok, err := dc.WaitContext(ctx)
		cancel()
		if !ok || err != nil {
			t.Fatalf("publish %d not acked: %v", i, err)
		}
	}
	// Every publish is confirmed, so every copy is enqueued by now.
	if n, err := b.admin.QueueDeclarePassive(q, false, true, true, false, nil); err != nil || n.Messages != 1 {
		t.Fatalf("queue bound to elsewhere.key has %d messages (%v), want 1: only CC routes a copy", n.Messages, err)
	}
	if d, ok, err := b.admin.Get(q, true); err != nil || !ok || d.MessageId != "CC" {
		t.Fatalf("queue bound to elsewhere.key got %q (%v), want the message with CC", d.MessageId, err)
	}
}
