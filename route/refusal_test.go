package route

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cdc-router/cdc-router/route/message/messagetest"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/cdc-router/cdc-router/internal/cdc"
	"github.com/cdc-router/cdc-router/internal/testenv"
)

// TestNackIsThatMessagesRefusal: a queue with x-max-length-bytes and x-overflow=reject-publish nacks a
// message larger than it allows even while it is empty. The nack names its message, so the Router's
// error is a per-message refusal (the caller's safety net retries it alone) that the broker's state may
// end (a full queue drains), so that it is retried for the refusal period before it is quarantined.
func TestNackIsThatMessagesRefusal(t *testing.T) {
	b := newBroker(t)
	cfg := b.config("")
	cfg.Lanes = 1
	r := b.dial(cfg)
	b.queue("#", amqp.Table{"x-max-length-bytes": int32(100), "x-overflow": "reject-publish"})
	big := event("big", "1", 1)
	big.Payload = fmt.Appendf(nil, `{"pad":%q}`, strings.Repeat("x", 500))
	publishAll(t, r, newCounter(), big)
	err := waitFailed(t, r, 10*time.Second)
	var pe *PublishError
	if !errors.As(err, &pe) || pe.EventID != big.ID || !cdc.PerMessage(err) || !cdc.BrokerState(err) ||
		!strings.Contains(err.Error(), "x-max-length-bytes") || !strings.Contains(err.Error(), b.exchange) {
		t.Fatalf("Err = %v (per message %v, broker state %v), want a nack of %s, per message, that the broker's state may end, "+
			"naming the exchange and the queue limits", err, cdc.PerMessage(err), cdc.BrokerState(err), big.ID)
	}
}

// TestWriteRefusedOnMappedExchangeIsPerMessage: a user without write permission on one exchange of
// amqp.topic.target=exchange makes RabbitMQ close the lane's channel with 403 ACCESS_REFUSED when an event
// is published there. That is a property of the events routed there, not of the connection: the error is
// a per-message refusal, one the broker's state may end (the permission may be granted, so the caller
// retries it for --refusal-retry), and names the permission to grant.
func TestWriteRefusedOnMappedExchangeIsPerMessage(t *testing.T) {
	b := newBroker(t)
	target := b.exchange + ".target"
	t.Cleanup(func() { _ = b.admin.ExchangeDelete(target, false, false) })
	if err := b.admin.ExchangeDeclare(target, amqp.ExchangeDirect, false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	cfg := b.config(testenv.RabbitMQUser(t, "^(?!"+regexp.QuoteMeta(target)+"$).*"))
	cfg.Lanes = 1
	r := b.dial(cfg)
	ev := messagetest.MappedEvent()
	ev.Mapped.ByExchange, ev.Mapped.Exchange, ev.Mapped.RoutingKey = true, target, "k-1"
	if err := r.Publish(context.Background(), ev, nil); err != nil {
		t.Fatal(err)
	}
	err := waitFailed(t, r, 10*time.Second)
	var ce *ClosedError
	if !errors.As(err, &ce) || ce.Code != 403 || ce.Connection || ce.Refused == nil || ce.Refused.Exchange != target ||
		!cdc.PerMessage(err) || !cdc.BrokerState(err) || ce.EventID != ev.ID || !strings.Contains(err.Error(), "set_permissions") {
		t.Fatalf("Err = %v, want a 403 channel close, per message, naming the exchange and rabbitmqctl set_permissions", err)
	}
	t.Logf("%v", err)
}

// TestWriteRefusedOnOwnExchangeIsNotPerMessage: a 403 that refuses writing to the Router's own exchange
// concerns every event: it is never blamed on one. It is Permanent, and names the permission to grant (the
// chaos harness's permissions-revoked: the stream restarted with a WARN carrying the broker's words only).
func TestWriteRefusedOnOwnExchangeIsNotPerMessage(t *testing.T) {
	own := &amqp.Error{Code: 403, Server: true, Reason: "ACCESS_REFUSED - write access to exchange 'cdc' in vhost '/' refused for user 'u'"}
	if ce := closedError(own, false, 0, "e-1", "cdc"); ce.PerMessage() || ce.Refused != nil || !ce.Permanent() ||
		!strings.Contains(ce.Error(), `grant it write permission on vhost "/" (rabbitmqctl set_permissions -p / u `) {
		t.Errorf("a 403 on the Router's own exchange: PerMessage %v, Refused %v, Permanent %v: %v", ce.PerMessage(), ce.Refused, ce.Permanent(), ce)
	}
	other := &amqp.Error{Code: 403, Server: true, Reason: "ACCESS_REFUSED - write access to exchange 'it''s' in vhost 'v' refused for user 'u'"}
	if ce := closedError(other, false, 0, "e-1", "cdc"); !ce.PerMessage() || ce.Refused == nil || ce.Refused.Vhost != "v" || ce.Permanent() {
		t.Errorf("a 403 on another exchange: PerMessage %v, Refused %+v", ce.PerMessage(), ce.Refused)
	}
	if ce := closedError(other, true, -1, "", "cdc"); ce.PerMessage() {
		t.Error("a connection closed with 403 was blamed on one message")
	}
}
