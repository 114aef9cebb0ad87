package inbox

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Prepare runs Config.Prepare in a transaction of its own, then Check, and marks the Processor ready
// when both pass. New and Process call it while the Processor is not ready; a runner that found
// PostgreSQL unreachable in New calls it until it passes (Ready).
func (p *Processor) Prepare(ctx context.Context) error {
	if p.cfg.Prepare != nil {
		err := p.inTxWith(ctx, "", func(tx pgx.Tx) error { return p.cfg.Prepare(ctx, tx) })
		if err != nil {
			return fmt.Errorf("inbox Config.Prepare: %w", err)
		}
	}
	if err := p.Check(ctx); err != nil {
		return err
	}
	p.ready.Store(true)
	return nil
}

// Ready reports whether Prepare passed: the schema was checked and Config.Prepare ran.
func (p *Processor) Ready() bool { return p.ready.Load() }

// Unreachable reports an error that says PostgreSQL does not answer yet (not listening, starting up or
// shutting down, out of connections, a lost or timed-out connection), which waiting cures; a refused
// login, a missing database or a missing privilege is not.
func Unreachable(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch c := pgErr.Code; {
		case c == "57P01", c == "57P02", c == "57P03", c == "53300", strings.HasPrefix(c, "08"):
			return true
		}
		return false
	}
	var connErr *pgconn.ConnectError
	var netErr net.Error
	return errors.As(err, &connErr) || errors.As(err, &netErr) || pgconn.Timeout(err) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, pgconn.ErrConnClosed)
}
