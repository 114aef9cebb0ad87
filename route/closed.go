package route

import (
	"fmt"
	"regexp"

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
}

// WriteRefused is what RabbitMQ's 403 on a publish names: "access to exchange 'x' in vhost 'v' refused
// for user 'u'" (RabbitMQ 3.x; "write access to ..." in later versions).
type WriteRefused struct{ Exchange, Vhost, User string }

// writeRefused matches RabbitMQ's reply text of a 403 on basic.publish.
var writeRefused = regexp.MustCompile(`(?:write )?access to exchange '((?:[^']|'')*)' in vhost '((?:[^']|'')*)' refused for user '((?:[^']|'')*)'`)

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
	if e.EventID != "" {
		s += fmt.Sprintf(" (oldest unconfirmed event of the lane: %s)", e.EventID)
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
// for a 403 too unless it refused writing to an exchange other than the Router's own (Refused): the
// exchange of a mapped event (amqp.topic.target=exchange), which only its events are published to.
// ErrConfirmTimeout is not a ClosedError: it is transient.
func (e *ClosedError) PerMessage() bool {
	if e.Refused != nil {
		return true
	}
	switch e.Code {
	case amqp.PreconditionFailed, amqp.FrameError, amqp.SyntaxError, amqp.UnexpectedFrame, amqp.NotImplemented:
		return true
	}
	return false
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
			w := &WriteRefused{Exchange: m[1], Vhost: m[2], User: m[3]}
			if m[1] != own {
				ce.Refused = w
			} else {
				ce.OwnRefused = w
			}
		}
	default: // amqp091 reports a lost connection as its own 501 FRAME_ERROR, with Server false
		ce.Connection, ce.Reason = true, e.Reason
	}
	return ce
}
