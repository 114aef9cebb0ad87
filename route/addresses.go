package route

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/cdc-router/cdc-router/route/rabbitmq"
)

// SplitURLs splits Config.URL into its AMQP URLs: "amqp://a:5672/,amqp://b:5672/" is two (rabbitmq.Split:
// only a comma directly followed by amqp:// or amqps:// separates two URLs; a trailing comma makes an empty
// last URL, which Validate refuses; an empty list is nil).
func SplitURLs(list string) []string { return rabbitmq.Split(list) }

// parseAddresses parses every URL of the list (rabbitmq.Parse: an invalid one is named by its position,
// without its password); an empty list is a configuration error.
func parseAddresses(list string) ([]rabbitmq.Address, error) {
	if len(rabbitmq.Split(list)) == 0 {
		return nil, fmt.Errorf("%w: the AMQP URL is empty: set it, e.g. amqp://user:password@host:5672/vhost", ErrInvalidConfig)
	}
	return rabbitmq.Parse(list)
}

// connectAny connects to the first address, from addrs[start] on in a circle, that accepts the AMQP
// handshake. An address that cannot be reached is logged and the next is tried; any other failure (a
// refused login or vhost, a cancelled ctx) ends the attempt at once, since every node of a cluster would
// answer the same. It returns the index of the address it connected to.
func connectAny(ctx context.Context, cfg Config, logger *slog.Logger, addrs []rabbitmq.Address, start int) (*amqp.Connection, *socket, int, error) {
	var errs []error
	for n := range addrs {
		i := (start + n) % len(addrs)
		conn, sock, err := connect(ctx, cfg, addrs[i])
		if err == nil {
			return conn, sock, i, nil
		}
		if ctx.Err() != nil || !errors.Is(err, ErrUnreachable) || len(addrs) == 1 {
			return nil, nil, i, err
		}
		errs = append(errs, err)
		if n < len(addrs)-1 {
			logger.Warn("RabbitMQ address failed; trying the next one", slog.String("address", addrs[i].HostPort()),
				slog.String("error", err.Error()))
		}
	}
	texts := make([]string, len(errs))
	for i, err := range errs {
		texts[i] = err.Error()
	}
	return nil, nil, -1, &rabbitmq.Sentence{Kind: ErrUnreachable, Cause: errors.Join(errs...), Text: fmt.Sprintf(
		"none of the %d RabbitMQ addresses accepted a connection: %s", len(addrs), strings.Join(texts, "; "))}
}

// Dialer dials a Router again and again, as a restarting caller does, moving through the addresses of
// Config.URL: each Dial starts with the address after the one the previous Dial connected to, so after
// the loss of a node the router goes to the next node first and tries the lost one last. With a single
// address it is Dial. Its methods are safe for concurrent use.
type Dialer struct {
	cfg Config
	log *slog.Logger

	mu   sync.Mutex
	next int

	logged  sync.Map // the exchanges of amqp.topic.target=exchange already logged as found, by its Routers
	refused refusals // aggregates refused by its Routers and not confirmed since (refused.go)
}

// NewDialer returns a Dialer for cfg; a nil logger discards the log. cfg is validated by each Dial.
func NewDialer(cfg Config, logger *slog.Logger) *Dialer {
	return &Dialer{cfg: cfg, log: logger}
}

// Probe tells whether a Router could be dialled now: it connects as Dial does (any address of Config.URL),
// declares the topology, and closes the connection, logging nothing. A router standing by calls it, so that a
// wrong URL, a refused login, or a permission its user lacks to declare shows before it takes over (a write
// refused on publishing, 403 on basic.publish, shows only then). Its errors are Dial's.
func (d *Dialer) Probe(ctx context.Context) error {
	cfg, addrs, conn, sock, used, err := reach(ctx, d.cfg, slog.New(slog.DiscardHandler), 0)
	if err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() { sock.close() })
	err = declare(conn, cfg, addrs[used].URI)
	if !stop() && err == nil {
		err = fmt.Errorf("connect to RabbitMQ: %w", ctx.Err())
	}
	_ = closeConnection(conn, sock)
	return err
}

// Dial is the package's Dial, starting with the address after the one last connected to.
func (d *Dialer) Dial(ctx context.Context) (*Router, error) {
	d.mu.Lock()
	start := d.next
	d.mu.Unlock()
	r, used, err := dial(ctx, d.cfg, d.log, start, &d.logged, &d.refused)
	if used >= 0 {
		d.mu.Lock()
		d.next = used + 1
		d.mu.Unlock()
	}
	return r, err
}
