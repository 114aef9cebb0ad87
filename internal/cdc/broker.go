package cdc

import "errors"

// ErrBroker marks a failure on the broker's side (a connection lost or closed by RabbitMQ, a publish that
// failed) wherever it surfaces: a stage that publishes without owning the stream (the snapshot's copier)
// wraps its publisher's failure with BrokerFailure, so that the stream's restart is counted as a broker one
// by code that never imports the broker client. errors.Is(err, ErrBroker) tells it.
var ErrBroker = errors.New("the broker failed")

type brokerFailure struct{ err error }

func (e brokerFailure) Error() string   { return e.err.Error() }
func (e brokerFailure) Unwrap() []error { return []error{e.err, ErrBroker} }

// BrokerFailure marks err as a broker failure; its text and what it wraps stay err's.
func BrokerFailure(err error) error {
	if err == nil {
		return nil
	}
	return brokerFailure{err}
}
