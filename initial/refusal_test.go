package initial

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cdc-router/cdc-router/internal/cdc"
)

// TestRefusalOnlyForTheTable: a check of the table or its predicate that fails on the table (its shape, the
// predicate, a PostgreSQL error of the statement) is a refusal; one that fails on the connection (EOF, the
// network, a timeout, PostgreSQL shutting down) is retried with the run.
func TestRefusalOnlyForTheTable(t *testing.T) {
	for _, tc := range []struct {
		err   error
		fatal bool
	}{
		{errors.New("table public.outbox has no column aggregate_id"), true},
		{fmt.Errorf("read public.outbox: %w", &pgconn.PgError{Code: "42703", Message: "column x does not exist"}), true},
		{fmt.Errorf("read the columns of public.outbox: %w", io.ErrUnexpectedEOF), false},
		{fmt.Errorf("read public.outbox: %w", &net.OpError{Op: "read", Err: errors.New("connection reset by peer")}), false},
		{fmt.Errorf("read public.outbox: %w", &pgconn.PgError{Code: "57P01", Message: "terminating connection due to administrator command"}), false},
		{fmt.Errorf("read public.outbox: %w", pgconn.ErrConnClosed), false},
		{fmt.Errorf("read the columns of public.outbox: %w", context.Canceled), false}, // a stop
	} {
		err := refusal(tc.err)
		var f *cdc.Fatal
		if got := errors.As(err, &f); got != tc.fatal {
			t.Errorf("refusal(%v) is a refusal: %v, want %v", tc.err, got, tc.fatal)
		}
		if err.Error() != tc.err.Error() {
			t.Errorf("refusal(%v) says %q", tc.err, err)
		}
	}
}
