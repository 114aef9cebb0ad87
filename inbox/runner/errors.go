package runner

import (
	"errors"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"
)

// closeError is a channel or connection closed by the broker or the network, with the broker's code
// and reason ("consume q: AMQP channel closed by RabbitMQ: 404 NOT_FOUND - no queue 'q' in vhost '/'").
// It wraps ErrChannelClosed and the *amqp.Error.
type closeError struct {
	what string
	amqp *amqp.Error
}

func (e *closeError) Error() string {
	by := "by RabbitMQ"
	if !e.amqp.Server {
		by = "by the client library"
	}
	return fmt.Sprintf("%s: %v %s: %d %s", e.what, ErrChannelClosed, by, e.amqp.Code, e.amqp.Reason)
}

func (e *closeError) Unwrap() []error { return []error{ErrChannelClosed, e.amqp} }

// brokerError wraps err, keeping the broker's code and reason when it is an *amqp.Error.
func brokerError(what string, err error) error {
	var ae *amqp.Error
	if errors.As(err, &ae) {
		return &closeError{what: what, amqp: ae}
	}
	return fmt.Errorf("%s: %w", what, err)
}

// fatalError is a refusal that reconnecting cannot cure; Run returns it. fix names what to change.
type fatalError struct {
	err error
	fix string
}

func (e *fatalError) Error() string { return e.err.Error() + "; " + e.fix }

func (e *fatalError) Unwrap() error { return e.err }

func fatal(err error, fix string) error { return &fatalError{err: err, fix: fix} }

func isFatal(err error) bool {
	var f *fatalError
	return errors.As(err, &f)
}

// setupError is brokerError for a declaration or binding: access refused (403, 530) is fatal, and so is
// PRECONDITION_FAILED (406) when onPrecondition names its fix. A 404 (the exchange deleted since it was
// checked) is not: the next session waits for it again.
func setupError(what string, err error, onPrecondition string) error {
	e := brokerError(what, err)
	var ae *amqp.Error
	if !errors.As(err, &ae) {
		return e
	}
	switch {
	case ae.Code == amqp.AccessRefused || ae.Code == amqp.NotAllowed:
		return fatal(e, "grant the user configure and write permission on the queue, read permission "+
			"on the queue and the exchange, in this vhost")
	case ae.Code == amqp.PreconditionFailed && onPrecondition != "":
		return fatal(e, onPrecondition)
	}
	return e
}
