package rabbitmq

import "errors"

// Sentinel errors, checked with errors.Is; route exports each as its own.
var (
	// ErrInvalidURL: the AMQP URL does not parse. The error never contains the password.
	ErrInvalidURL = errors.New("invalid AMQP URL")
	// ErrUnreachable: no TCP connection to RabbitMQ could be made.
	ErrUnreachable = errors.New("RabbitMQ unreachable")
	// ErrAccessRefused: RabbitMQ refused the login, the vhost or a declaration (403, 530).
	ErrAccessRefused = errors.New("RabbitMQ access refused")
	// ErrConnectionLimit: RabbitMQ refused the connection because a vhost's or the user's max-connections
	// is reached (530 NOT_ALLOWED). Connections lingering after a cut end it in time, so it is retried; every
	// node of a cluster answers the same.
	ErrConnectionLimit = errors.New("RabbitMQ connection limit reached")
	// ErrExchangeMismatch: an exchange or the unroutable queue already exists with other arguments
	// (406 PRECONDITION_FAILED on the declare).
	ErrExchangeMismatch = errors.New("exchange already exists with other arguments")
)

// Sentence is an error whose text is one sentence naming the fix; it matches Kind with errors.Is and
// unwraps to Cause, which is never an amqp091 type.
type Sentence struct {
	Text  string
	Kind  error
	Cause error
}

func (s *Sentence) Error() string        { return s.Text }
func (s *Sentence) Is(target error) bool { return target == s.Kind }
func (s *Sentence) Unwrap() error        { return s.Cause }
