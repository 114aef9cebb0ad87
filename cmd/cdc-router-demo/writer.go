package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// write inserts one order and its order.created event per tick, each pair in one transaction, and now and
// then an order.paid event (version 2) for an earlier order. It starts only once the router's slot exists:
// a row committed before that is never decoded.
func write(ctx context.Context, cfg config, t *tally, ready <-chan struct{}, log io.Writer) error {
	conn, err := pgx.Connect(ctx, cfg.pgURL)
	if err != nil {
		return fmt.Errorf("connect to PostgreSQL (--pg-url): %w", err)
	}
	defer conn.Close(context.Background())
	table := pgx.Identifier(strings.Split(cfg.table, ".")).Sanitize()
	if _, err := conn.Exec(ctx, createOrders); err != nil {
		return fmt.Errorf("create table orders: %w", err)
	}
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", table).Scan(&exists); err != nil {
		return fmt.Errorf("look up %s: %w", cfg.table, err)
	}
	if !exists {
		return fmt.Errorf("outbox table %s does not exist: run `cdc-router migrate` first", cfg.table)
	}
	if err := awaitSlot(ctx, conn, cfg.slot, log); err != nil {
		return err
	}
	select {
	case <-ready:
	case <-ctx.Done():
		return nil
	}
	fmt.Fprintf(log, "demo: writing one order every %v to orders and %s\n", cfg.interval, cfg.table)
	var stop <-chan time.Time
	if cfg.duration > 0 {
		stop = time.After(cfg.duration)
	}
	tick := time.NewTicker(cfg.interval)
	defer tick.Stop()
	var unpaid []order
	for n := 0; cfg.count == 0 || n < cfg.count; {
		o, err := insertOrder(ctx, conn, table, t)
		if err != nil {
			return stopped(ctx, err)
		}
		n++
		if !cfg.consume {
			fmt.Fprintf(log, "wrote order %d and its order.created event\n", o.id)
		}
		unpaid = append(unpaid, o)
		if len(unpaid) > 1 && rand.IntN(3) == 0 && (cfg.count == 0 || n < cfg.count) {
			i := rand.IntN(len(unpaid) - 1) // an earlier order, not the one just written
			if err := insertPaid(ctx, conn, table, unpaid[i], t); err != nil {
				return stopped(ctx, err)
			}
			n++
			if !cfg.consume {
				fmt.Fprintf(log, "wrote order.paid for order %d\n", unpaid[i].id)
			}
			unpaid = append(unpaid[:i], unpaid[i+1:]...)
		}
		select {
		case <-tick.C:
		case <-stop:
			return nil
		case <-ctx.Done():
			return nil
		}
	}
	return nil
}

// stopped hides the error of a statement that a stop request interrupted.
func stopped(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}

func awaitSlot(ctx context.Context, conn *pgx.Conn, slot string, log io.Writer) error {
	for i := 0; ; i++ {
		var exists bool
		err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1)", slot).Scan(&exists)
		if err != nil {
			return stopped(ctx, fmt.Errorf("look up replication slot %s: %w", slot, err))
		}
		if exists {
			return nil
		}
		if i%30 == 0 {
			fmt.Fprintf(log, "demo: waiting for replication slot %s: start `cdc-router run` (rows written before it exists are never published)\n", slot)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
}
