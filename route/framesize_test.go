package route

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cdc-router/cdc-router/route/message/messagetest"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/cdc-router/cdc-router/internal/cdc"
	"github.com/cdc-router/cdc-router/route/message"
)

// recordingConn keeps every byte amqp091 writes to the broker.
type recordingConn struct {
	net.Conn
	mu  sync.Mutex
	out []byte
}

func (c *recordingConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	c.out = append(c.out, p...)
	c.mu.Unlock()
	return c.Conn.Write(p)
}

// headerFrames parses the client's side of an AMQP connection (protocol header, then frames) and returns
// the payload sizes of its content header frames, in order.
func (c *recordingConn) headerFrames(t *testing.T) []int {
	t.Helper()
	c.mu.Lock()
	b := append([]byte(nil), c.out...)
	c.mu.Unlock()
	if len(b) < 8 || string(b[:4]) != "AMQP" {
		t.Fatalf("no AMQP protocol header in what the client wrote")
	}
	b = b[8:]
	var sizes []int
	for len(b) > 0 {
		if len(b) < 8 {
			t.Fatalf("truncated frame: %d bytes left", len(b))
		}
		typ, size := b[0], int(binary.BigEndian.Uint32(b[3:7]))
		if len(b) < 7+size+1 || b[7+size] != 0xCE {
			t.Fatalf("frame of type %d and size %d does not end with frame-end", typ, size)
		}
		if typ == 2 {
			sizes = append(sizes, size)
		}
		b = b[7+size+1:]
	}
	return sizes
}

// recordingDial opens an amqp091 connection whose writes are recorded, with a confirm-mode channel; it
// returns the negotiated frame_max as well.
func recordingDial(t *testing.T, url string) (*amqp.Channel, *recordingConn, int) {
	t.Helper()
	var rec *recordingConn
	conn, err := amqp.DialConfig(url, amqp.Config{Dial: func(network, addr string) (net.Conn, error) {
		c, err := net.Dial(network, addr)
		if err != nil {
			return nil, err
		}
		rec = &recordingConn{Conn: c}
		return rec, nil
	}})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	return ch, rec, conn.Config.FrameSize
}

// TestContentHeaderSizeIsWhatAmqp091Writes: for messages with every property and every header value type
// the mapping produces, contentHeaderSize equals the payload size of the content header frame amqp091
// actually wrote on the wire.
func TestContentHeaderSizeIsWhatAmqp091Writes(t *testing.T) {
	b := newBroker(t)
	ch, rec, _ := recordingDial(t, b.url)
	uri, _ := amqp.ParseURI(b.url)
	var msgs []amqp.Publishing
	for _, edit := range []func(*cdc.Event){
		func(*cdc.Event) {},
		func(ev *cdc.Event) { ev.Backfill = true },
		func(ev *cdc.Event) { ev.OccurredAt, ev.EventType = time.Time{}, "" },               // no timestamp, no type
		func(ev *cdc.Event) { ev.OccurredAt = time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC) }, // negative Unix time
		func(ev *cdc.Event) {
			ev.Headers = []byte(`{"s":"x","big":18446744073709551616,"i":-3,"f":0.5,"t":true,"o":{"a":[1]},"n":null,"u":"é","":"empty name"}`)
		},
		func(ev *cdc.Event) {
			ev.Headers = []byte(`{"` + strings.Repeat("k", 255) + `":"` + strings.Repeat("v", 70000) + `"}`)
		},
	} {
		ev := messagetest.NativeEvent()
		edit(&ev)
		_, msg, err := message.Build(ev)
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, msg)
	}
	msgs = append(msgs, amqp.Publishing{}, amqp.Publishing{ // no property at all, then all of them
		ContentType: "text/plain", ContentEncoding: "gzip", Headers: amqp.Table{"a": int32(1)}, DeliveryMode: 1,
		Priority: 3, CorrelationId: "c", ReplyTo: "r", Expiration: "60000", MessageId: "m", Timestamp: time.Unix(1, 0),
		Type: "t", UserId: uri.Username, AppId: "app", Body: []byte("body"),
	})
	var want []int
	for _, m := range msgs {
		n, _, err := message.ContentHeaderSize(m)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, n)
		dc, err := ch.PublishWithDeferredConfirm("", "nowhere."+b.exchange, false, false, m)
		if err != nil {
			t.Fatalf("publish: %v", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		ok, err := dc.WaitContext(ctx)
		cancel()
		if !ok || err != nil {
			t.Fatalf("message %d not acked (%v): the broker refused it", len(want), err)
		}
	}
	got := rec.headerFrames(t)
	if len(got) != len(want) {
		t.Fatalf("%d content header frames on the wire, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("message %d: amqp091 wrote a content header of %d bytes, contentHeaderSize says %d", i, got[i], want[i])
		}
	}
	t.Logf("content header payload sizes on the wire: %v", got)
}

// paddedTo returns the sample event with id and a "pad" header that makes its content header frame
// (framing included) exactly frame bytes.
func paddedTo(t testing.TB, id string, frame int) cdc.Event {
	t.Helper()
	ev := messagetest.NativeEvent()
	ev.ID = id
	ev.Headers = []byte(`{"pad":""}`)
	_, msg, err := message.Build(ev)
	if err != nil {
		t.Fatal(err)
	}
	base, _, _ := message.ContentHeaderSize(msg)
	pad := frame - message.FrameOverhead - base
	if pad < 0 {
		t.Fatalf("frame %d is below the event's minimum %d", frame, base+message.FrameOverhead)
	}
	ev.Headers = []byte(`{"pad":"` + strings.Repeat("p", pad) + `"}`)
	return ev
}

// TestFrameBoundaryAgainstTheBroker: through the Router, an event whose content header frame is exactly
// the negotiated frame_max is accepted by the check and acked by the broker; one byte more is refused by
// the check with ErrInvalidEvent and a precise reason, and the Router goes on.
func TestFrameBoundaryAgainstTheBroker(t *testing.T) {
	b := newBroker(t)
	r := b.dial(b.config(""))
	b.queue("#", nil)
	t.Logf("negotiated frame_max: %d", r.frameMax)
	c := newCounter()
	at := paddedTo(t, "at-the-limit", r.frameMax)
	if err := r.Publish(context.Background(), at, c.done(at.ID)); err != nil {
		t.Fatalf("Publish of a content header of exactly frame_max: %v", err)
	}
	over := paddedTo(t, "one-byte-over", r.frameMax+1)
	err := r.Publish(context.Background(), over, c.done(over.ID))
	if !errors.Is(err, ErrInvalidEvent) || !errors.Is(err, cdc.ErrUnpublishable) {
		t.Fatalf("Publish one byte over frame_max = %v, want ErrInvalidEvent", err)
	}
	want := "the message's properties and headers take 131,065 bytes (131,073 with framing), over the broker's frame_max of 131,072"
	if r.frameMax == 131072 && !strings.Contains(err.Error(), want) {
		t.Errorf("reason = %q\nwant it to contain %q", err, want)
	}
	t.Logf("refusal: %v", err)
	after := event("after", "1", 1)
	publishAll(t, r, c, after)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.Drain(ctx); err != nil {
		t.Fatalf("Drain: %v", err)
	}
	if c.count(at.ID) != 1 || c.count(after.ID) != 1 || c.count(over.ID) != 0 {
		t.Fatalf("done counts: at the limit %d, after %d, over %d; want 1, 1, 0", c.count(at.ID), c.count(after.ID), c.count(over.ID))
	}
}

// TestBrokerFrameTolerance pins what RabbitMQ itself does at the boundary, without the Router's check: it
// tolerates content header payloads up to frame_max (8 bytes more than the AMQP specification's
// frame_max-8, its FRAME_SIZE_FUDGE) and closes the connection with 501 FRAME_ERROR above. The Router's
// check keeps to the specification, which is also what amqp091 consumers enforce on the frames they read.
func TestBrokerFrameTolerance(t *testing.T) {
	b := newBroker(t)
	publish := func(payload int) (bool, *amqp.Error) {
		ch, _, fm := recordingDial(t, b.url)
		if fm != message.DefaultFrameMax {
			t.Fatalf("negotiated frame_max %d, this test expects RabbitMQ's default %d", fm, message.DefaultFrameMax)
		}
		closes := ch.NotifyClose(make(chan *amqp.Error, 1))
		msg := amqp.Publishing{Headers: amqp.Table{"pad": ""}}
		base, _, _ := message.ContentHeaderSize(msg)
		msg.Headers["pad"] = strings.Repeat("p", payload-base)
		if n, _, _ := message.ContentHeaderSize(msg); n != payload {
			t.Fatalf("padding gave %d bytes, want %d", n, payload)
		}
		dc, err := ch.PublishWithDeferredConfirm("", "nowhere."+b.exchange, false, false, msg)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ok, _ := dc.WaitContext(ctx)
		if ok {
			return true, nil
		}
		select {
		case e := <-closes:
			return false, e
		case <-time.After(2 * time.Second):
			return false, nil
		}
	}
	frameMax := message.DefaultFrameMax
	for _, tc := range []struct {
		payload int
		ok      bool
	}{{frameMax - message.FrameOverhead, true}, {frameMax, true}, {frameMax + 1, false}} {
		ok, e := publish(tc.payload)
		t.Logf("content header payload %d (frame %d): acked=%v close=%v", tc.payload, tc.payload+message.FrameOverhead, ok, e)
		if ok != tc.ok {
			t.Errorf("payload %d: acked=%v, want %v", tc.payload, ok, tc.ok)
		}
		if !tc.ok && (e == nil || e.Code != amqp.FrameError || !e.Server) {
			t.Errorf("payload %d: close = %v, want the broker's 501 FRAME_ERROR", tc.payload, e)
		}
	}
}
