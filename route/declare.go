package route

import (
	"context"
	"fmt"
	"log/slog"
)

// Declare connects with cfg, declares the topology the Router publishes to (the exchange and, unless
// NoAlternateExchange, the alternate exchange and its queue), exactly as Dial does, and disconnects. It
// lets a deployment create the exchange before the first `run`, so consumers can bind their queues before
// the initial snapshot publishes anything. Errors are the sentences Dial returns.
func Declare(ctx context.Context, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	cfg = cfg.withDefaults()
	addrs, err := parseAddresses(cfg.URL)
	if err != nil {
		return err
	}
	conn, sock, used, err := connectAny(ctx, cfg, slog.New(slog.DiscardHandler), addrs, 0)
	if err != nil {
		return err
	}
	uri := addrs[used].URI
	defer closeConnection(conn, sock) //nolint:errcheck // the declarations are done or failed
	stop := context.AfterFunc(ctx, func() { sock.close() })
	defer stop()
	if err := declare(conn, cfg, uri); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("declare the topology: %w", ctx.Err())
		}
		return err
	}
	return nil
}

// UnroutableMessages is the number of messages in the alternate exchange's queue, read with a passive
// declare on a channel of its own; ok is false with NoAlternateExchange or when the queue is gone.
func (r *Router) UnroutableMessages() (n int, ok bool) {
	if r.cfg.NoAlternateExchange {
		return 0, false
	}
	ch, err := r.conn.Channel()
	if err != nil {
		return 0, false
	}
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(r.cfg.AlternateExchange, true, false, false, false, nil)
	if err != nil {
		return 0, false
	}
	return q.Messages, true
}
