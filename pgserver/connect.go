package pgserver

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cdc-router/cdc-router/internal/cdc"
)

// replicationParams pins the walsender session's output formats, as PostgreSQL's own subscriber does, so
// text values arrive in one known form whatever the server's defaults are.
var replicationParams = map[string]string{
	"replication":        "database",
	"application_name":   "cdc-router",
	"DateStyle":          "ISO",
	"TimeZone":           "UTC",
	"IntervalStyle":      "postgres",
	"extra_float_digits": "3",
	"bytea_output":       "hex",
}

// parseURL parses the user's postgres:// URL once, with a message that names the fix and never echoes
// the URL (it may hold a password).
// The certificate and key files the URL names are read first, so that a problem with one is reported naming
// the file and its parameter instead of as an invalid URL.
func parseURL(url string) (*pgconn.Config, error) {
	if err := pgTLSFiles(url).Check(); err != nil {
		return nil, &cdc.Fatal{Msg: err.Error()}
	}
	cfg, err := pgconn.ParseConfig(url)
	var perr *pgconn.ParseConfigError
	if errors.As(err, &perr) && strings.Contains(perr.Error(), "failed to configure TLS") && errors.Unwrap(perr) != nil {
		// ParseConfigError's text holds the URL (with the password masked at best); its cause does not.
		return nil, cdc.Fatalf("the TLS settings of the PostgreSQL URL cannot be used (%v): check sslmode, sslrootcert, "+
			"sslcert, sslkey and sslpassword in --pg-url (CDC_ROUTER_PG_URL) and the PGSSL* environment variables",
			errors.Unwrap(perr))
	}
	if err != nil {
		return nil, cdc.Fatalf("the PostgreSQL URL is invalid: use postgres://user:password@host:5432/dbname in --pg-url (CDC_ROUTER_PG_URL)")
	}
	if err := requirePrimary(cfg); err != nil {
		return nil, err
	}
	return cfg, nil
}

// ErrStandby marks a server that is in recovery (a standby): the router writes its position and streams
// from a slot that only a primary can advance, so it connects to primaries only. A connection that found
// only standbys wraps it (a failover in progress: the stream looks for the primary every second).
var ErrStandby = errors.New("the server is a standby (in recovery)")

// validatePrimary is the connection check of every router connection: SELECT pg_is_in_recovery(), which
// a walsender (replication=database) answers too.
func validatePrimary(ctx context.Context, conn *pgconn.PgConn) error {
	res, err := conn.Exec(ctx, "SELECT pg_is_in_recovery()").ReadAll()
	if err != nil {
		return err
	}
	if len(res) == 1 && len(res[0].Rows) == 1 && string(res[0].Rows[0][0]) == "t" {
		return ErrStandby
	}
	return nil
}

// requirePrimary makes every connection of cfg (each host of a multi-host URL) accept only a primary, as
// target_session_attrs=primary does, and refuses a target_session_attrs that asks for a standby.
func requirePrimary(cfg *pgconn.Config) error {
	same := func(f pgconn.ValidateConnectFunc) bool {
		return reflect.ValueOf(cfg.ValidateConnect).Pointer() == reflect.ValueOf(f).Pointer()
	}
	switch {
	case cfg.ValidateConnect == nil, same(pgconn.ValidateConnectTargetSessionAttrsPrimary),
		same(pgconn.ValidateConnectTargetSessionAttrsReadWrite):
	case same(pgconn.ValidateConnectTargetSessionAttrsStandby), same(pgconn.ValidateConnectTargetSessionAttrsReadOnly),
		same(pgconn.ValidateConnectTargetSessionAttrsPreferStandby):
		return cdc.Fatalf("target_session_attrs in --pg-url (CDC_ROUTER_PG_URL) or PGTARGETSESSIONATTRS asks for a standby, " +
			"but the router writes its position and streams from a slot on the primary: use target_session_attrs=primary " +
			"(or leave it out)")
	default:
		return nil // a check the router does not know (none today): keep it
	}
	cfg.ValidateConnect = validatePrimary
	return nil
}

// hostOf names the server (or, for a multi-host URL, every server) a connection tries.
func hostOf(cfg *pgconn.Config) string {
	hosts := []string{cfg.Host + ":" + strconv.Itoa(int(cfg.Port))}
	for _, f := range cfg.Fallbacks {
		if h := f.Host + ":" + strconv.Itoa(int(f.Port)); !slices.Contains(hosts, h) {
			hosts = append(hosts, h)
		}
	}
	return strings.Join(hosts, ",")
}

// Host names the server (or servers) of url for messages, or says "the --pg-url server" when the URL
// cannot be parsed (that error is reported by the connection itself).
func Host(url string) string {
	cfg, err := parseURL(url)
	if err != nil {
		return "(the --pg-url server)"
	}
	return hostOf(cfg)
}

// standbyError is the retryable error of a connection that found only standbys: during a failover the old
// primary is gone and the standby not promoted yet, so the router retries; before its first start it gives
// up after the start-up grace with this sentence.
func standbyError(host string, err error) error {
	return &Retryable{Msg: fmt.Sprintf("no primary PostgreSQL at %s: every server that answered is a standby (in recovery) "+
		"and the router streams only from a primary; point --pg-url (CDC_ROUTER_PG_URL) at the primary, or list every "+
		"server (postgres://user@host1:5432,host2:5432/db?target_session_attrs=primary) so that the router finds the "+
		"new primary after a failover", host), Err: err}
}

// DefaultPGTimeout is the default bound of run's --pg-timeout (Config.PGTimeout), and the bound of every
// connection attempt of the other commands: a PostgreSQL that accepts TCP but never answers (a stalled
// server, a silent network partition) costs each attempt this long at most, as the AMQP handshake's bound
// does on the broker's side.
const DefaultPGTimeout = 30 * time.Second

// bound makes each connection attempt of cfg (each host of a multi-host URL, including its TLS handshake,
// authentication and the primary check) end within d; a connect_timeout in the URL shorter than d wins.
// Without it pgconn waits as long as the server keeps the TCP connection open.
func bound(cfg *pgconn.Config, d time.Duration) {
	if d <= 0 {
		d = DefaultPGTimeout
	}
	if cfg.ConnectTimeout == 0 || cfg.ConnectTimeout > d {
		cfg.ConnectTimeout = d
	}
}

// explainConnectWithin is explainConnect for an attempt bounded by d: a server that did not finish the
// connection in time is named, with the bound, as a retryable failure.
func explainConnectWithin(err error, host string, d time.Duration) error {
	if f := explainTLS(err); f != nil {
		return f
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) && (pgconn.Timeout(err) || errors.Is(err, context.DeadlineExceeded)) {
		return &Retryable{Msg: fmt.Sprintf("PostgreSQL at %s did not complete the connection within %v: it accepts TCP "+
			"but does not answer (a stalled server or a silent network partition); the router tries again (the bound is "+
			"--pg-timeout, or a shorter connect_timeout in --pg-url)", host, d), Err: err}
	}
	return explainConnect(err, host)
}

// ConnectReplication opens a replication connection (replication=database) with the walsender session's
// output formats pinned, each attempt bounded by d. prepare, when not nil, sees the connection's
// configuration last before it connects: the stream installs the reader of its wire there.
func ConnectReplication(ctx context.Context, url string, d time.Duration, prepare func(*pgconn.Config)) (*pgconn.PgConn, error) {
	cfg, err := parseURL(url)
	if err != nil {
		return nil, err
	}
	for k, v := range replicationParams {
		cfg.RuntimeParams[k] = v
	}
	if prepare != nil {
		prepare(cfg)
	}
	bound(cfg, d)
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, explainConnectWithin(err, hostOf(cfg), cfg.ConnectTimeout)
	}
	return conn, nil
}

// ConnectSQL opens an ordinary (non-replication) connection for checks, the stored position and quarantine
// writes, with a connection failure turned into one sentence that names the fix. Each attempt ends within
// DefaultPGTimeout (or the URL's shorter connect_timeout).
func ConnectSQL(ctx context.Context, url string) (*pgx.Conn, error) {
	return ConnectSQLWithin(ctx, url, DefaultPGTimeout)
}

// ConnectSQLWithin is ConnectSQL with each attempt bounded by d (run's --pg-timeout).
func ConnectSQLWithin(ctx context.Context, url string, d time.Duration) (*pgx.Conn, error) {
	if _, err := parseURL(url); err != nil {
		return nil, err
	}
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, cdc.Fatalf("the PostgreSQL URL is invalid: use postgres://user:password@host:5432/dbname in --pg-url (CDC_ROUTER_PG_URL)")
	}
	if err := requirePrimary(&cfg.Config); err != nil {
		return nil, err
	}
	delete(cfg.RuntimeParams, "replication")
	cfg.RuntimeParams["application_name"] = "cdc-router"
	cfg.RuntimeParams["client_encoding"] = "UTF8" // quarantine values are UTF-8 whatever the database's encoding
	bound(&cfg.Config, d)
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, explainConnectWithin(err, hostOf(&cfg.Config), cfg.ConnectTimeout)
	}
	return conn, nil
}

// ConnectReader opens a snapshot or backfill reader's connection, with the output formats the row mapping
// expects: those the replication connection pins, so that a row read here has the text it has in the stream.
// Each attempt ends within DefaultPGTimeout (or the URL's shorter connect_timeout).
func ConnectReader(ctx context.Context, url string) (*pgx.Conn, error) {
	return ConnectReaderWithin(ctx, url, DefaultPGTimeout)
}

// ConnectReaderWithin is ConnectReader with each attempt bounded by d (run's --pg-timeout).
func ConnectReaderWithin(ctx context.Context, url string, d time.Duration) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, cdc.Fatalf("the PostgreSQL URL is invalid: use postgres://user:password@host:5432/dbname in --pg-url (CDC_ROUTER_PG_URL)")
	}
	if err := requirePrimary(&cfg.Config); err != nil {
		return nil, err
	}
	delete(cfg.RuntimeParams, "replication")
	for k, v := range map[string]string{"application_name": "cdc-router reader", "TimeZone": "UTC", "DateStyle": "ISO",
		"client_encoding": "UTF8", "IntervalStyle": "postgres", "bytea_output": "hex", // the text forms pgoutput sends (replicationParams)
		"extra_float_digits": "3", "idle_in_transaction_session_timeout": "0", "statement_timeout": "0"} {
		cfg.RuntimeParams[k] = v
	}
	bound(&cfg.Config, d)
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, explainConnectWithin(err, hostOf(&cfg.Config), cfg.ConnectTimeout)
	}
	return conn, nil
}
