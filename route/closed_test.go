package route

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cdc-router/cdc-router/internal/cdc"
	"github.com/cdc-router/cdc-router/internal/testenv"
	"github.com/cdc-router/cdc-router/route/message"
)

// perMessage is how the caller (replication) detects a refusal one message can cause.
type perMessage interface{ PerMessage() bool }

// isPerMessage is the caller's check: some error in the chain says it can be one message's fault.
func isPerMessage(err error) bool {
	var pm perMessage
	return errors.As(err, &pm) && pm.PerMessage()
}

func TestClosedErrorPerMessage(t *testing.T) {
	for code, want := range map[int]bool{406: true, 501: true, 502: true, 505: true, 540: true,
		0: false, 320: false, 403: false, 404: false, 405: false, 503: false, 504: false, 530: false, 541: false} {
		err := fmt.Errorf("stream: %w", &ClosedError{Code: code, Reason: "x", Lane: -1})
		if got := isPerMessage(err); got != want {
			t.Errorf("code %d: PerMessage = %v, want %v", code, got, want)
		}
		if !errors.Is(err, ErrBrokerClosed) {
			t.Errorf("code %d: a ClosedError does not match ErrBrokerClosed", code)
		}
	}
	for _, err := range []error{&PublishError{EventID: "e", Reason: "nacked"},
		fmt.Errorf("lane 0: event e: %w after 1s", ErrConfirmTimeout), ErrClosed} {
		if isPerMessage(err) {
			t.Errorf("%v counts as a per-message refusal; it is transient", err)
		}
	}
}

// uncheckedRouter is a Router that skips the mapping's checks, so that the broker's own refusals can be
// provoked; one lane, so the guilty event is the first unresolved one of the failed lane.
func uncheckedRouter(t *testing.T, b *broker) *Router {
	cfg := b.config("")
	cfg.Lanes = 1
	r := b.dial(cfg)
	r.unchecked = true
	b.queue("#", nil)
	return r
}

// TestBroker406IsPerMessage: a CC header that is not an array makes RabbitMQ close the channel with 406;
// the Router's error is a *ClosedError for the channel, per message, naming the event when it was the
// only one in flight (with others in flight it names the oldest unconfirmed one, maybe an innocent one).
func TestBroker406IsPerMessage(t *testing.T) {
	b := newBroker(t)
	r := uncheckedRouter(t, b)
	good, bad := event("cc", "1", 1), event("cc", "1", 2)
	bad.Headers = []byte(`{"CC":"x"}`)
	if err := message.Check(bad); !errors.Is(err, ErrInvalidEvent) {
		t.Fatalf("message.Check(CC) = %v, want a refusal", err)
	}
	publishAll(t, r, newCounter(), good)
	if err := r.Drain(context.Background()); err != nil {
		t.Fatal(err)
	}
	publishAll(t, r, newCounter(), bad) // alone in flight, as the caller republishes a suspect
	err := waitFailed(t, r, 5*time.Second)
	var ce *ClosedError
	// EventID is a hint: the close can be reported before the lane has recorded the publishing it names.
	if !errors.As(err, &ce) || ce.Code != 406 || ce.Connection || (ce.EventID != bad.ID && ce.EventID != "") || !isPerMessage(err) ||
		!errors.Is(err, ErrBrokerClosed) || !strings.Contains(ce.Reason, "unacceptable_type_in_header") {
		t.Fatalf("Err = %#v (%v), want a per-message channel ClosedError 406 naming %s", ce, err, bad.ID)
	}
	t.Logf("%v", err)
}

// TestBroker501IsPerMessage: a content header frame over frame_max makes RabbitMQ close the connection
// with 501; the Router's error is a *ClosedError for the connection, per message.
func TestBroker501IsPerMessage(t *testing.T) {
	b := newBroker(t)
	r := uncheckedRouter(t, b)
	bad := paddedTo(t, "too-large", r.frameMax+message.FrameOverhead+1) // one byte over what RabbitMQ tolerates
	publishAll(t, r, newCounter(), bad)
	err := waitFailed(t, r, 5*time.Second)
	var ce *ClosedError
	if !errors.As(err, &ce) || ce.Code != 501 || !ce.Connection || !isPerMessage(err) || !errors.Is(err, ErrBrokerClosed) {
		t.Fatalf("Err = %#v (%v), want a per-message connection ClosedError 501", ce, err)
	}
	t.Logf("%v", err)
}

// TestForcedCloseIsNotPerMessage: an operator's rabbitmqctl close_connection (320 CONNECTION_FORCED) is
// not a message's fault.
func TestForcedCloseIsNotPerMessage(t *testing.T) {
	b := newBroker(t)
	cfg := b.config("")
	cfg.ConnectionName = b.exchange // unique, to find the connection
	r := b.dial(cfg)
	out, err := testenv.Rabbitmqctl(t, "list_connections", "-s", "pid", "client_properties").CombinedOutput()
	if err != nil {
		t.Fatalf("rabbitmqctl list_connections: %v: %s", err, out)
	}
	var pid string
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, `"`+b.exchange+`"`) {
			pid, _, _ = strings.Cut(line, "\t")
		}
	}
	if pid == "" {
		t.Fatalf("connection %q not listed by rabbitmqctl:\n%s", b.exchange, out)
	}
	if out, err := testenv.Rabbitmqctl(t, "close_connection", pid, "route test: forced close").CombinedOutput(); err != nil {
		t.Fatalf("rabbitmqctl close_connection: %v: %s", err, out)
	}
	err = waitFailed(t, r, 10*time.Second)
	var ce *ClosedError
	if !errors.As(err, &ce) || ce.Code != 320 || !ce.Connection || isPerMessage(err) {
		t.Fatalf("Err = %#v (%v), want a connection ClosedError 320 that is not per message", ce, err)
	}
	t.Logf("%v", err)
}

// TestLostConnectionIsNotPerMessage: a TCP cut is reported as a lost connection (Code 0), which amqp091
// itself describes as a 501 FRAME_ERROR of its own; it is not a message's fault.
func TestLostConnectionIsNotPerMessage(t *testing.T) {
	b := newBroker(t)
	p := b.proxy()
	r := b.dial(b.config(b.viaProxy(p)))
	b.queue("#", nil)
	publishAll(t, r, newCounter(), event("lost", "1", 1))
	p.Cut()
	err := waitFailed(t, r, 10*time.Second)
	var ce *ClosedError
	if !errors.As(err, &ce) || ce.Code != 0 || !ce.Connection || isPerMessage(err) || !errors.Is(err, ErrBrokerClosed) {
		t.Fatalf("Err = %#v (%v), want a lost-connection ClosedError that is not per message", ce, err)
	}
	t.Logf("%v", err)
}

// TestNackSettlesAndTimeoutIsNotPerMessage: a nack from a full queue names its message but may end when the
// queue drains (BrokerState: the caller retries it for the refusal period before it blames the event); a
// confirm timeout is transient.
func TestNackSettlesAndTimeoutIsNotPerMessage(t *testing.T) {
	b := newBroker(t)
	cfg := b.config("")
	cfg.Lanes = 1
	r := b.dial(cfg)
	b.queue("#", map[string]any{"x-max-length": int32(1), "x-overflow": "reject-publish"})
	publishAll(t, r, newCounter(), event("full", "1", 1), event("full", "1", 2))
	if err := waitFailed(t, r, 10*time.Second); !isPerMessage(err) || !cdc.BrokerState(err) {
		t.Errorf("nack: %v, want per message and ended by the broker's state", err)
	}
	other := newBroker(t)
	p := other.proxy()
	cfg = other.config(other.viaProxy(p))
	cfg.ConfirmTimeout = 500 * time.Millisecond
	r = other.dial(cfg)
	p.Pause()
	if err := r.Publish(context.Background(), event("slow", "1", 1), nil); err != nil {
		t.Fatal(err)
	}
	if err := waitFailed(t, r, 5*time.Second); !errors.Is(err, ErrConfirmTimeout) || isPerMessage(err) {
		t.Errorf("confirm timeout: %v, want ErrConfirmTimeout, not per message", err)
	}
	closePromptly(t, r)
}
