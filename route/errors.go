package route

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"syscall"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/cdc-router/cdc-router/internal/cdc"
)

// Sentinel errors, checked with errors.Is.
var (
	// ErrInvalidURL: the AMQP URL does not parse. The error never contains the password.
	ErrInvalidURL = errors.New("invalid AMQP URL")
	// ErrUnreachable: no TCP connection to RabbitMQ could be made.
	ErrUnreachable = errors.New("RabbitMQ unreachable")
	// ErrAccessRefused: RabbitMQ refused the login, the vhost or a declaration (403, 530).
	ErrAccessRefused = errors.New("RabbitMQ access refused")
	// ErrExchangeMismatch: an exchange or the unroutable queue already exists with other arguments
	// (406 PRECONDITION_FAILED on the declare).
	ErrExchangeMismatch = errors.New("exchange already exists with other arguments")
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

// sentence is an error whose text is one sentence naming the fix; it matches its sentinel with errors.Is
// and unwraps to its cause, which is never an amqp091 type.
type sentence struct {
	text  string
	kind  error
	cause error
}

func (s *sentence) Error() string        { return s.text }
func (s *sentence) Is(target error) bool { return target == s.kind }
func (s *sentence) Unwrap() error        { return s.cause }

// parseURL parses an AMQP URL into its parts, turning a failure into a sentence without the password.
func parseURL(raw string) (amqp.URI, error) {
	uri, err := amqp.ParseURI(raw)
	if err == nil {
		return uri, nil
	}
	reason := err.Error()
	var uerr *url.Error
	if errors.As(err, &uerr) {
		// url.Error quotes the whole URL, password included.
		reason = "it does not parse as a URL"
	}
	return amqp.URI{}, &sentence{kind: ErrInvalidURL, text: fmt.Sprintf(
		"the AMQP URL is not valid (%s): write it as amqp://user:password@host:5672/vhost, "+
			"percent-encoding reserved characters in the user name and password", reason)}
}

// connectError turns a failed amqp.DialConfig into one sentence naming the fix.
func connectError(uri amqp.URI, err error) error {
	addr := net.JoinHostPort(uri.Host, fmt.Sprint(uri.Port))
	var aerr *amqp.Error
	var nerr net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return &sentence{kind: ErrUnreachable, cause: err, text: fmt.Sprintf(
			"RabbitMQ at %s refused the connection: start RabbitMQ or fix the host and port in the AMQP URL", addr)}
	case errors.As(err, &aerr) && aerr.Code == amqp.AccessRefused:
		return &sentence{kind: ErrAccessRefused, text: fmt.Sprintf(
			"RabbitMQ at %s refused the login of user %q (403 ACCESS_REFUSED): check the user name and password in the AMQP URL",
			addr, uri.Username)}
	case errors.As(err, &aerr) && aerr.Code == amqp.NotAllowed:
		return &sentence{kind: ErrAccessRefused, text: fmt.Sprintf(
			"RabbitMQ at %s refused user %q access to vhost %q (530 NOT_ALLOWED: %s): create the vhost or grant the user permissions on it "+
				"(rabbitmqctl set_permissions -p <vhost> <user> \".*\" \".*\" \".*\"), or fix the vhost in the AMQP URL",
			addr, uri.Username, uri.Vhost, aerr.Reason)}
	case errors.As(err, &aerr) && aerr.Server:
		return &sentence{kind: ErrUnreachable, text: fmt.Sprintf(
			"RabbitMQ at %s closed the connection during the handshake (%d %s): check the broker's log", addr, aerr.Code, aerr.Reason)}
	case errors.As(err, &aerr):
		return &sentence{kind: ErrUnreachable, text: fmt.Sprintf(
			"the connection to %s broke during the AMQP handshake (%s): check that this is RabbitMQ's AMQP port and that the network is sound",
			addr, aerr.Reason)}
	case errors.As(err, &nerr):
		return &sentence{kind: ErrUnreachable, cause: err, text: fmt.Sprintf(
			"cannot reach RabbitMQ at %s (%v): check the host and port in the AMQP URL and the network", addr, err)}
	}
	return &sentence{kind: ErrUnreachable, cause: err, text: fmt.Sprintf(
		"cannot connect to RabbitMQ at %s (%v): check the AMQP URL and the broker's log", addr, err)}
}

// declareError turns a failed declaration into one sentence naming the fix.
func declareError(cfg Config, user, vhost, what, name string, err error) error {
	var aerr *amqp.Error
	if !errors.As(err, &aerr) {
		return fmt.Errorf("declare %s %q: %w", what, name, err)
	}
	switch {
	case aerr.Code == amqp.PreconditionFailed && name == cfg.Exchange:
		return &sentence{kind: ErrExchangeMismatch, text: exchangeMismatch(cfg)}
	case aerr.Code == amqp.PreconditionFailed && what == "queue" && strings.Contains(aerr.Reason, "x-queue-type"):
		return &sentence{kind: ErrExchangeMismatch, text: queueTypeMismatch(cfg, name, aerr.Reason)}
	case aerr.Code == amqp.PreconditionFailed:
		return &sentence{kind: ErrExchangeMismatch, text: fmt.Sprintf(
			"%s %q already exists with other arguments (%s): delete it (rabbitmqadmin delete %s name=%s) so the router can declare it, "+
				"or start with --no-alternate-exchange, or choose another --exchange",
			what, name, aerr.Reason, what, name)}
	case aerr.Code == amqp.NotFound && what == "queue" && strings.Contains(aerr.Reason, "home node"):
		// A classic queue lives on one node of a cluster; the router retries until that node is back.
		return &sentence{kind: ErrUnreachable, text: fmt.Sprintf(
			"queue %q cannot be declared while the cluster node it lives on is down (%d %s): with a RabbitMQ cluster, "+
				"delete it once that node is back (rabbitmqadmin delete queue name=%s) and run with --unroutable-queue-type quorum",
			name, aerr.Code, aerr.Reason, name)}
	case aerr.Code == amqp.AccessRefused:
		return &sentence{kind: ErrAccessRefused, text: fmt.Sprintf(
			"user %q may not declare %s %q on vhost %q (403 ACCESS_REFUSED): grant it configure and write permissions on the vhost "+
				"(rabbitmqctl set_permissions -p <vhost> <user> \".*\" \".*\" \".*\")", user, what, name, vhost)}
	}
	return fmt.Errorf("declare %s %q: %d %s", what, name, aerr.Code, aerr.Reason)
}

// queueTypeMismatch is the sentence for an unroutable queue that exists with another x-queue-type; reason
// is RabbitMQ's, "... received 'classic' but current is 'quorum'".
func queueTypeMismatch(cfg Config, name, reason string) string {
	keep := "choose another --alternate-exchange"
	_, current, _ := strings.Cut(reason, "current is ")
	if strings.HasPrefix(current, "none") {
		current = QueueTypeClassic // declared without x-queue-type, as before the setting existed
	} else {
		current, _, _ = strings.Cut(strings.TrimPrefix(current, "'"), "'")
	}
	if current == QueueTypeClassic || current == QueueTypeQuorum {
		keep = "start with --unroutable-queue-type " + current + " to keep it"
	}
	return fmt.Sprintf("the unroutable queue %q already exists with another type than --unroutable-queue-type %s (406 %s): "+
		"%s, or, to change its type, move its messages away (shovel them to another queue), delete it "+
		"(rabbitmqctl delete_queue %s) and start again so the router declares it as %s",
		name, cfg.UnroutableQueueType, reason, keep, name, cfg.UnroutableQueueType)
}

// exchangeMismatch is the sentence for a main exchange that exists with other arguments.
func exchangeMismatch(cfg Config) string {
	del := fmt.Sprintf("delete it (rabbitmqadmin delete exchange name=%s) so the router can declare it", cfg.Exchange)
	if cfg.NoAlternateExchange {
		return fmt.Sprintf("exchange %q already exists with other arguments (declared with an alternate exchange, or not as a durable topic exchange?): "+
			"%s, or start without --no-alternate-exchange, or choose another --exchange", cfg.Exchange, del)
	}
	return fmt.Sprintf("exchange %q already exists with other arguments (declared without alternate-exchange %q?): "+
		"%s, or start with --no-alternate-exchange, or choose another --exchange", cfg.Exchange, cfg.AlternateExchange, del)
}
