package route

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/cdc-router/cdc-router/internal/cdc"
)

// exchanges remembers the exchanges a mapped event (amqp.topic.target=exchange) was found to have, so that
// each is checked once per Router with a passive declare on a channel of its own: publishing to a missing
// exchange would make RabbitMQ close the lane's channel with 404, fail the Router and, on every restart, do
// it again. A missing exchange is not remembered (it is checked again for the next event, so one declared
// meanwhile is used at once); an exchange deleted after its check closes a lane's channel once, and the
// next Router checks it again.
type exchanges struct {
	mu    sync.Mutex
	found map[string]bool
	// logged holds the exchanges whose first finding was logged: the Dialer's, shared by the Routers it
	// dials, so that a restarting stream logs each exchange once per process; a Router of Dial has its own.
	logged *sync.Map
}

// exchange is the exchange ev is published to: the Router's, or the one a mapping routes it to. An
// exchange that does not exist refuses ev with an error wrapping ErrInvalidEvent that names the fix,
// so that the caller quarantines it; an error of the connection is returned as it is.
func (r *Router) exchange(ev cdc.Event) (string, error) {
	if ev.Mapped == nil || !ev.Mapped.ByExchange || ev.Mapped.Exchange == r.cfg.Exchange {
		return r.cfg.Exchange, nil
	}
	name := ev.Mapped.Exchange
	r.exchanges.mu.Lock()
	defer r.exchanges.mu.Unlock()
	if r.exchanges.found[name] {
		return name, nil
	}
	ch, err := r.conn.Channel()
	if err != nil {
		return "", fmt.Errorf("check exchange %q: %w", name, err)
	}
	err = ch.ExchangeDeclarePassive(name, amqp.ExchangeTopic, true, false, false, false, nil) // RabbitMQ ignores the kind of a passive declare
	var aerr *amqp.Error
	switch {
	case err == nil:
		_ = ch.Close()
		if r.exchanges.found == nil {
			r.exchanges.found = map[string]bool{}
		}
		r.exchanges.found[name] = true
		if _, seen := r.exchanges.logged.LoadOrStore(name, true); !seen {
			r.log.Info("publishing to an exchange a topic names (amqp.topic.target=exchange): it exists", slog.String("exchange", name))
		}
		return name, nil
	case errors.As(err, &aerr) && aerr.Code == amqp.NotFound:
		return "", fmt.Errorf("%w: exchange %q does not exist (amqp.topic.target=exchange routes this event to it, and the router "+
			"declares only --exchange): declare exchange %q and bind its queues, then replay this record", ErrInvalidEvent, name, name)
	case errors.As(err, &aerr) && aerr.Code == amqp.AccessRefused:
		return "", fmt.Errorf("%w: the router's user may not use exchange %q (%s): grant it write permission on the exchange, "+
			"then replay this record", ErrInvalidEvent, name, aerr.Reason)
	}
	return "", fmt.Errorf("check exchange %q: %w", name, err)
}
