package route

import (
	"errors"
	"fmt"

	"github.com/cdc-router/cdc-router/internal/cdc"
	"github.com/cdc-router/cdc-router/route/rabbitmq"
)

// Sentinel errors, checked with errors.Is. Those of reaching RabbitMQ and declaring the topology are
// package rabbitmq's, whose errors match them.
var (
	// ErrInvalidURL: an AMQP URL of Config.URL does not parse (its error never shows the password).
	ErrInvalidURL = rabbitmq.ErrInvalidURL
	// ErrUnreachable: no address of Config.URL took a TCP connection (or a classic queue's node is down).
	ErrUnreachable = rabbitmq.ErrUnreachable
	// ErrAccessRefused: the login, the vhost or a declaration was refused (403, 530).
	ErrAccessRefused = rabbitmq.ErrAccessRefused
	// ErrConnectionLimit: a vhost's or the user's max-connections is reached (530 NOT_ALLOWED); retried.
	ErrConnectionLimit = rabbitmq.ErrConnectionLimit
	// ErrExchangeMismatch: the exchange or the unroutable queue exists with other arguments (406 on the declare).
	ErrExchangeMismatch = rabbitmq.ErrExchangeMismatch
	// ErrClosed: the Router was closed by its owner.
	ErrClosed = errors.New("router closed")
	// ErrBrokerClosed: a lane's channel or the connection was closed by the broker or the network; the
	// broker's error is wrapped as well.
	ErrBrokerClosed = errors.New("channel or connection closed")
	// ErrConfirmTimeout: a message stayed unconfirmed for longer than Config.ConfirmTimeout.
	ErrConfirmTimeout = errors.New("publisher confirm timed out")
	// ErrInvalidEvent: an event can never become a message RabbitMQ accepts (an AMQP limit, a reserved
	// header name, a content header over the connection's frame_max; see Check and Router.Publish); it was
	// not published. It is cdc.ErrUnpublishable itself, so callers can detect it without importing route.
	ErrInvalidEvent = cdc.ErrUnpublishable
)

// PublishError is the failure of one event that the broker refused: a nack, or a basic.return.
type PublishError struct {
	EventID string // the outbox id, the message's message_id
	Reason  string // what the broker said, in words
	// OneMessage says that this message alone caused the refusal, whatever else is in flight: a nack (the
	// broker nacks a delivery tag, one message), or a return from an exchange the router did not declare
	// (amqp.topic.target=exchange), which has no alternate exchange the router could rely on. The caller's
	// safety net then retries the event alone and quarantines it once it keeps being refused. A return
	// from --exchange under --no-alternate-exchange is not: there the operator chose to hold the position
	// until a binding matches.
	OneMessage bool
	// Settles says that the broker's state rather than the message may be the cause, and may end it:
	// a return (a binding may appear: a consumer restarting with an auto-delete queue), a nack (a full
	// queue may drain). Set for every nack and return; the caller retries such a refusal for a period of
	// the operator's choice before it quarantines the event (cdc.Refusals).
	Settles bool
}

// PerMessage reports whether one message caused the refusal (see OneMessage).
func (e *PublishError) PerMessage() bool { return e.OneMessage }

// BrokerState reports whether the broker's state may end the refusal (see Settles).
func (e *PublishError) BrokerState() bool { return e.Settles }

// Error reports the event and the reason.
func (e *PublishError) Error() string {
	return fmt.Sprintf("publish event %s: %s", e.EventID, e.Reason)
}
