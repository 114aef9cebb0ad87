package route

import (
	"fmt"
	"regexp"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"
)

// ClosedError is the failure of a Router whose lane channel or connection ended while it worked: closed by
// the broker with a reply code, or lost (network failure, missed heartbeats, a write that failed), in which
// case Code is 0. It matches ErrBrokerClosed with errors.Is.
type ClosedError struct {
	// Code is the broker's reply code (406 PRECONDITION_FAILED, 501 FRAME_ERROR, 320 CONNECTION_FORCED, ...);
	// 0 when the connection was lost rather than closed by the broker.
	Code int
	// Reason is the broker's reply text, or what failed when the connection was lost.
	Reason string
	// Connection is true when the whole connection ended, false when only one lane's channel was closed.
	Connection bool
	// Lane is the lane whose channel reported the close; -1 when the connection's own notification did.
	Lane int
	// EventID is the oldest unconfirmed event of that lane when it is known (empty otherwise): the guilty
	// message when it was the only one in flight on the lane, otherwise only a hint (an earlier, innocent
	// message may still have been waiting for its confirm, and for a connection close any lane may report
	// first). Republishing one event at a time is the way to be sure.
	EventID string
	// Refused is set for a 403 ACCESS_REFUSED that names an exchange other than the Router's own (an
	// exchange of amqp.topic.target=exchange the user may not write to): the exchange, and the vhost and
	// user RabbitMQ named. Such a close is a property of the messages routed there, not of the connection.
	Refused *WriteRefused
	// OwnRefused is set for a 403 ACCESS_REFUSED that refuses writing to the Router's own exchange: no event
	// can be published until someone grants the permission, so the error names it and is Permanent.
	OwnRefused *WriteRefused
	// Internal is set for a 403 ACCESS_REFUSED "cannot publish to internal exchange 'x' in vhost 'v'" on a
	// lane's channel: the exchange (other than the Router's own) a mapped event was routed to is internal
	// (amq.rabbitmq.trace exists in every vhost), which no client may publish to, whatever its permissions.
	Internal string
	// TopicRefused is set for a 403 ACCESS_REFUSED that refuses writing one routing key to a topic exchange
	// (RabbitMQ's topic permissions, rabbitmqctl set_topic_permissions), the Router's own exchange included:
	// only the events of that routing key (aggregate_type.event_type, or a mapping's) are refused.
	TopicRefused *TopicRefused
	// Missing is set for a 404 NOT_FOUND "no exchange 'x' in vhost 'v'" on a lane's channel for an exchange
	// other than the Router's own: deleted after its passive check (the next Router checks it again).
	Missing string
	// Attributed says that EventID is the event whose publish the broker refused: the close names an
	// exchange (Refused, Internal, Missing) and EventID is the oldest unresolved publishing of the lane to
	// it, since RabbitMQ handles a channel's publishes in order and closes it at the first it refuses. The
	// other publishings in flight on the channel lost their confirms with it: they are not refused, and the
	// caller publishes them again.
	Attributed bool
}

// WriteRefused is what RabbitMQ's 403 on a publish names: "access to exchange 'x' in vhost 'v' refused
// for user 'u'" (RabbitMQ 3.x; "write access to ..." in later versions).
type WriteRefused struct{ Exchange, Vhost, User string }

// TopicRefused is what RabbitMQ's 403 on a publish that its topic permissions refuse names: "access to
// topic 'k' in exchange 'x' in vhost 'v' refused for user 'u'" (3.x; "write access to ..." in 4.x).
type TopicRefused struct{ RoutingKey, Exchange, Vhost, User string }

// topicRefused matches RabbitMQ's reply text of a 403 on basic.publish refused by a topic permission.
var topicRefused = regexp.MustCompile(`(?:write )?access to topic '((?:[^']|'')*)' in exchange '((?:[^']|'')*)' in vhost '((?:[^']|'')*)' refused for user '((?:[^']|'')*)'`)

// writeRefused matches RabbitMQ's reply text of a 403 on basic.publish.
var writeRefused = regexp.MustCompile(`(?:write )?access to exchange '((?:[^']|'')*)' in vhost '((?:[^']|'')*)' refused for user '((?:[^']|'')*)'`)

// internalRefused and noExchange match RabbitMQ's reply texts of a basic.publish to an internal exchange
// (403, rabbit_channel:check_internal_exchange, 3.x and 4.x alike) and to an exchange that does not exist
// (404, rabbit_exchange:lookup_or_die): "cannot publish to internal exchange 'x' in vhost 'v'", "no exchange
// 'x' in vhost 'v'". A quote in a name is doubled.
var (
	internalRefused = regexp.MustCompile(`cannot publish to internal exchange '((?:[^']|'')*)' in vhost '((?:[^']|'')*)'`)
	noExchange      = regexp.MustCompile(`no exchange '((?:[^']|'')*)' in vhost '((?:[^']|'')*)'`)
)

// unquote undoes the doubling of a quote in a name of RabbitMQ's reply text.
func unquote(s string) string { return strings.ReplaceAll(s, "''", "'") }

// Error says who closed what, with the broker's code and text.
func (e *ClosedError) Error() string {
	var s string
	switch {
	case e.Code == 0 && e.Connection:
		s = "connection to RabbitMQ lost: " + e.Reason
	case e.Code == 0:
		s = "channel closed: " + e.Reason
	case e.Connection:
		s = fmt.Sprintf("connection closed by the broker: %d %s", e.Code, e.Reason)
	default:
		s = fmt.Sprintf("channel closed by the broker: %d %s", e.Code, e.Reason)
	}
	if e.Lane >= 0 {
		s = fmt.Sprintf("lane %d: %s", e.Lane, s)
	}
	switch {
	case e.EventID != "" && e.Attributed:
		s += fmt.Sprintf(" (refusing the publish of event %s)", e.EventID)
	case e.EventID != "":
		s += fmt.Sprintf(" (oldest unconfirmed event of the lane: %s)", e.EventID)
	}
	if w := e.TopicRefused; w != nil {
		s += fmt.Sprintf(": user %q may not publish routing key %q to topic exchange %q: grant it (rabbitmqctl set_topic_permissions "+
			"-p %s %s %s <write> <read>, with a write pattern that matches %s), then replay the quarantined events",
			w.User, w.RoutingKey, w.Exchange, w.Vhost, w.User, w.Exchange, w.RoutingKey)
	}
	if e.Internal != "" {
		s += fmt.Sprintf(": exchange %q is internal, and RabbitMQ refuses every publish to it whatever the user's permissions; "+
			"amqp.topic.target=exchange routed the event there: correct the row's topic or the mapping "+
			"(route.topic.replacement), then replay the quarantined event", e.Internal)
	}
	if e.Missing != "" {
		s += fmt.Sprintf(": exchange %q was deleted after the router found it: declare exchange %q and bind its queues, "+
			"then replay the quarantined event", e.Missing, e.Missing)
	}
	if w := e.OwnRefused; w != nil {
		s += fmt.Sprintf(": user %q may not publish to the router's exchange %q: grant it write permission on vhost %q "+
			"(rabbitmqctl set_permissions -p %s %s <configure> <write> <read>, with a write pattern that matches %s); "+
			"no event is acknowledged past the refused one, and the router streams again once it is granted",
			w.User, w.Exchange, w.Vhost, w.Vhost, w.User, w.Exchange)
	}
	if w := e.Refused; w != nil {
		s += fmt.Sprintf(": grant user %q write permission on exchange %q in vhost %q (rabbitmqctl set_permissions -p %s %s "+
			"<configure> <write> <read>, with a write pattern that matches %s), then replay the quarantined events",
			w.User, w.Exchange, w.Vhost, w.Vhost, w.User, w.Exchange)
	}
	return s
}

// Permanent reports whether the close needs a human before any event can be published: a 403 that refused
// writing to the Router's own exchange (OwnRefused). The stream stops on it (cdc.Permanent) instead of
// restarting with a warning, as it does on a 403 when it declares its topology.
func (e *ClosedError) Permanent() bool { return e.OwnRefused != nil }

// Is makes a ClosedError match ErrBrokerClosed.
func (e *ClosedError) Is(target error) bool { return target == ErrBrokerClosed }

// PerMessage reports whether the broker's code is one that a single message can cause, so that
// republishing the same message would end the same way: 406 PRECONDITION_FAILED (e.g. a header of a type
// RabbitMQ refuses, a body over max_message_size), 501 FRAME_ERROR (a frame over frame_max), 502
// SYNTAX_ERROR, 505 UNEXPECTED_FRAME and 540 NOT_IMPLEMENTED. It is false for every other close (320
// CONNECTION_FORCED by an operator or a node shutting down, 404, 541, ...) and for a lost connection, and
// for a 403 or a 404 too unless it names an exchange other than the Router's own (Refused, Internal,
// Missing): the exchange of a mapped event (amqp.topic.target=exchange), which only its events are
// published to; or a routing key that a topic permission refuses (TopicRefused), on any exchange.
// ErrConfirmTimeout is not a ClosedError: it is transient.
func (e *ClosedError) PerMessage() bool {
	if e.Refused != nil || e.TopicRefused != nil || e.Internal != "" || e.Missing != "" {
		return true
	}
	switch e.Code {
	case amqp.PreconditionFailed, amqp.FrameError, amqp.SyntaxError, amqp.UnexpectedFrame, amqp.NotImplemented:
		return true
	}
	return false
}

// BrokerState reports whether the broker's state rather than the message may end the refusal, so that the
// caller retries it for its refusal period (--refusal-retry) before it quarantines the event: a 403 that
// refused writing to an exchange of a mapped event (Refused: a permission revoked, or not yet granted, may
// be granted), a 403 of a topic permission (TopicRefused, likewise) and a 404 for such an exchange (Missing: it may be declared again; the next Router's passive
// check refuses the event at once meanwhile). A 403 on an internal exchange and a 406 never end by waiting.
func (e *ClosedError) BrokerState() bool {
	return e.Refused != nil || e.TopicRefused != nil || e.Missing != ""
}

// refusedExchange is the exchange the broker's reply names as the one it refused a publish to (Refused,
// TopicRefused, Internal, Missing), "" when it names none, and the routing key it names ("" when none).
func (e *ClosedError) refusedExchange() (exchange, key string) {
	switch {
	case e.Refused != nil:
		return e.Refused.Exchange, ""
	case e.TopicRefused != nil:
		return e.TopicRefused.Exchange, e.TopicRefused.RoutingKey
	case e.Internal != "":
		return e.Internal, ""
	}
	return e.Missing, ""
}

// closedError turns amqp091's close notification into a ClosedError. A nil or missing error is a close
// without a reason (a graceful close the Router did not ask for).
// own is the Router's exchange: a 403 that refuses writing to it is not a message's fault.
func closedError(e *amqp.Error, connection bool, lane int, eventID, own string) *ClosedError {
	ce := &ClosedError{Connection: connection, Lane: lane, EventID: eventID}
	switch {
	case e == nil:
		ce.Reason = "closed without a reason"
	case e.Server:
		ce.Code, ce.Reason = e.Code, e.Reason
		if m := writeRefused.FindStringSubmatch(e.Reason); e.Code == amqp.AccessRefused && !connection && m != nil {
			w := &WriteRefused{Exchange: unquote(m[1]), Vhost: unquote(m[2]), User: unquote(m[3])}
			if w.Exchange != own {
				ce.Refused = w
			} else {
				ce.OwnRefused = w
			}
		}
		if connection {
			break
		}
		if m := topicRefused.FindStringSubmatch(e.Reason); e.Code == amqp.AccessRefused && m != nil {
			ce.TopicRefused = &TopicRefused{RoutingKey: unquote(m[1]), Exchange: unquote(m[2]), Vhost: unquote(m[3]), User: unquote(m[4])}
		}
		if m := internalRefused.FindStringSubmatch(e.Reason); e.Code == amqp.AccessRefused && m != nil && unquote(m[1]) != own {
			ce.Internal = unquote(m[1])
		}
		if m := noExchange.FindStringSubmatch(e.Reason); e.Code == amqp.NotFound && m != nil && unquote(m[1]) != own {
			ce.Missing = unquote(m[1])
		}
	default: // amqp091 reports a lost connection as its own 501 FRAME_ERROR, with Server false
		ce.Connection, ce.Reason = true, e.Reason
	}
	return ce
}
