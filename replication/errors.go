package replication

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cdc-router/cdc-router/migrations"
)

// Fatal is an error that retrying cannot fix: a refusal to stream or a setup error the operator must fix.
// Its message is one sentence that says why and names what to do.
type Fatal struct{ Msg string }

func (f *Fatal) Error() string { return f.Msg }

func fatalf(format string, args ...any) error { return &Fatal{Msg: fmt.Sprintf(format, args...)} }

// IsFatal reports whether err must stop the router instead of restarting the stream.
func IsFatal(err error) bool {
	var f *Fatal
	var p *migrations.Problem
	return errors.As(err, &f) || errors.As(err, &p)
}

// explainConnect turns a failed PostgreSQL connection into one sentence naming the fix. Errors it does
// not recognise are returned wrapped, and are retried by the caller.
func explainConnect(err error, host string) error {
	if f := explainTLS(err); f != nil {
		return f
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "28P01":
			return fatalf("PostgreSQL refused the password for this user: check the credentials in --pg-url (CDC_ROUTER_PG_URL)")
		case "28000":
			if f := explainHBA(pgErr); f != nil {
				return f
			}
			return fatalf("PostgreSQL refused the connection (%s): add a pg_hba.conf line for this user and database, "+
				"then reload PostgreSQL", pgErr.Message)
		case "3D000":
			return fatalf("PostgreSQL says %s: fix the database name in --pg-url (CDC_ROUTER_PG_URL)", pgErr.Message)
		case "42501":
			return fatalf("the PostgreSQL user may not start logical replication (%s): run ALTER ROLE <user> WITH "+
				"REPLICATION as a superuser (docs/operations.md shows a least-privilege role)", pgErr.Message)
		case "55000":
			return fatalf("PostgreSQL refused logical replication (%s): set wal_level = logical and restart PostgreSQL",
				pgErr.Message)
		}
		if errors.Is(err, errStandby) { // another server of a multi-host URL is a standby
			return standbyError(host, err)
		}
		return fmt.Errorf("connect to PostgreSQL: %s (SQLSTATE %s)", pgErr.Message, pgErr.Code)
	}
	// Checked after the refusals above, which name a fix that a failover does not bring.
	if errors.Is(err, errStandby) {
		return standbyError(host, err)
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) {
		return &retryable{msg: fmt.Sprintf("cannot reach PostgreSQL at %s (%v): is it running, and are host and port in "+
			"--pg-url (CDC_ROUTER_PG_URL) right?", host, opErr.Err), err: err}
	}
	return fmt.Errorf("connect to PostgreSQL at %s: %w", host, err)
}

// explainHBA names the fix for a pg_hba.conf refusal that is about TLS: a client certificate the server did
// not accept for this user, or a connection without TLS where only hostssl lines match. Otherwise nil.
func explainHBA(pgErr *pgconn.PgError) error {
	switch msg := pgErr.Message; {
	case strings.Contains(msg, "certificate"):
		return fatalf("PostgreSQL refused the client certificate (%s): with cert authentication or clientcert=verify-full "+
			"the certificate that sslcert in --pg-url (CDC_ROUTER_PG_URL) names must have the user name as its common "+
			"name (or a pg_ident.conf mapping), and be signed by a CA in the server's ssl_ca_file", msg)
	case strings.Contains(msg, "no encryption"):
		return fatalf("PostgreSQL refused the connection (%s): this connection was not encrypted; if the server's "+
			"pg_hba.conf has a hostssl line for this user, add sslmode=verify-full (with sslrootcert) to --pg-url "+
			"(CDC_ROUTER_PG_URL), else add a pg_hba.conf line for this user and database and reload PostgreSQL", msg)
	}
	return nil
}

// retryable is a transient error whose message is already one sentence; it unwraps to its cause.
type retryable struct {
	msg string
	err error
}

func (r *retryable) Error() string { return r.msg }
func (r *retryable) Unwrap() error { return r.err }

// withinGrace shortens a restart wait before the first successful start so that it ends at the start-up
// grace at the latest: the last attempt is then made when the grace ends, and the router gives up about
// startupGrace after it began instead of up to a whole backoff later. After the grace, wait is unchanged.
func withinGrace(wait time.Duration, began time.Time, started bool) time.Duration {
	if left := startupGrace - time.Since(began); !started && left > 0 {
		return min(wait, left)
	}
	return wait
}

// streamError classifies an error the server sent inside the stream.
func streamError(err *pgconn.PgError, cfg Config) error {
	switch err.Code {
	case "55000":
		return fatalf("PostgreSQL can no longer stream from slot %s (%s): run `cdc-router reset --slot %s` and "+
			"`cdc-router run` to re-snapshot", cfg.Slot, err.Message, cfg.Slot)
	case "42704":
		if strings.HasPrefix(err.Message, "publication") {
			return publicationDropped(cfg, "PostgreSQL says "+err.Message)
		}
		return fatalf("PostgreSQL says %s: run `cdc-router migrate` or fix --publication / --slot", err.Message)
	}
	return fmt.Errorf("replication stream: %w", err)
}
