package pgserver

import (
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cdc-router/cdc-router/internal/cdc"
)

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
			return cdc.Fatalf("PostgreSQL refused the password (%s): check the user and password in --pg-url "+
				"(CDC_ROUTER_PG_URL), and the authentication method pg_hba.conf gives this user", pgErr.Message)
		case "28000":
			if f := explainHBA(pgErr); f != nil {
				return f
			}
			return cdc.Fatalf("PostgreSQL refused the connection (%s): add a pg_hba.conf line for this user and database, "+
				"then reload PostgreSQL", pgErr.Message)
		case "3D000":
			return cdc.Fatalf("PostgreSQL says %s: fix the database name in --pg-url (CDC_ROUTER_PG_URL)", pgErr.Message)
		case "42501":
			return cdc.Fatalf("the PostgreSQL user may not start logical replication (%s): run ALTER ROLE <user> WITH "+
				"REPLICATION as a superuser (docs/howto/set-up-the-database.md#database-role-and-access shows a least-privilege role)", pgErr.Message)
		case "55000":
			return cdc.Fatalf("PostgreSQL refused logical replication (%s): set wal_level = logical and restart PostgreSQL",
				pgErr.Message)
		}
		if errors.Is(err, ErrStandby) { // another server of a multi-host URL is a standby
			return standbyError(host, err)
		}
		return fmt.Errorf("connect to PostgreSQL: %s (SQLSTATE %s)", pgErr.Message, pgErr.Code)
	}
	// Checked after the refusals above, which name a fix that a failover does not bring.
	if errors.Is(err, ErrStandby) {
		return standbyError(host, err)
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) {
		return &Retryable{Msg: fmt.Sprintf("cannot reach PostgreSQL at %s (%v): is it running, and are host and port in "+
			"--pg-url (CDC_ROUTER_PG_URL) right?", host, opErr.Err), Err: err}
	}
	return fmt.Errorf("connect to PostgreSQL at %s: %w", host, err)
}

// explainHBA names the fix for a pg_hba.conf refusal that is about TLS: a client certificate the server did
// not accept for this user, or a connection without TLS where only hostssl lines match. Otherwise nil.
func explainHBA(pgErr *pgconn.PgError) error {
	switch msg := pgErr.Message; {
	case strings.Contains(msg, "certificate"):
		return cdc.Fatalf("PostgreSQL refused the client certificate (%s): with cert authentication or clientcert=verify-full "+
			"the certificate that sslcert in --pg-url (CDC_ROUTER_PG_URL) names must have the user name as its common "+
			"name (or a pg_ident.conf mapping), and be signed by a CA in the server's ssl_ca_file", msg)
	case strings.Contains(msg, "no encryption"):
		return cdc.Fatalf("PostgreSQL refused the connection (%s): this connection was not encrypted; if the server's "+
			"pg_hba.conf has a hostssl line for this user, add sslmode=verify-full (with sslrootcert) to --pg-url "+
			"(CDC_ROUTER_PG_URL), else add a pg_hba.conf line for this user and database and reload PostgreSQL", msg)
	}
	return nil
}

// Retryable is a transient error whose message is already one sentence that names the server; it unwraps
// to its cause. The stream restarts after it, and names it as it is.
type Retryable struct {
	Msg string
	Err error
}

func (r *Retryable) Error() string { return r.Msg }
func (r *Retryable) Unwrap() error { return r.Err }
