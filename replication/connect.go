package replication

import (
	"context"
	"errors"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
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
		return nil, &Fatal{Msg: err.Error()}
	}
	cfg, err := pgconn.ParseConfig(url)
	var perr *pgconn.ParseConfigError
	if errors.As(err, &perr) && strings.Contains(perr.Error(), "failed to configure TLS") && errors.Unwrap(perr) != nil {
		// ParseConfigError's text holds the URL (with the password masked at best); its cause does not.
		return nil, fatalf("the TLS settings of the PostgreSQL URL cannot be used (%v): check sslmode, sslrootcert, "+
			"sslcert, sslkey and sslpassword in --pg-url (CDC_ROUTER_PG_URL) and the PGSSL* environment variables",
			errors.Unwrap(perr))
	}
	if err != nil {
		return nil, fatalf("the PostgreSQL URL is invalid: use postgres://user:password@host:5432/dbname in --pg-url (CDC_ROUTER_PG_URL)")
	}
	return cfg, nil
}

func hostOf(cfg *pgconn.Config) string { return cfg.Host + ":" + strconv.Itoa(int(cfg.Port)) }

// connectReplication opens the replication connection (replication=database).
func connectReplication(ctx context.Context, url string) (*pgconn.PgConn, error) {
	cfg, err := parseURL(url)
	if err != nil {
		return nil, err
	}
	for k, v := range replicationParams {
		cfg.RuntimeParams[k] = v
	}
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, explainConnect(err, hostOf(cfg))
	}
	return conn, nil
}

// ConnectSQL opens an ordinary (non-replication) connection for checks, the stored position and quarantine
// writes, with a connection failure turned into one sentence that names the fix.
func ConnectSQL(ctx context.Context, url string) (*pgx.Conn, error) {
	if _, err := parseURL(url); err != nil {
		return nil, err
	}
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, fatalf("the PostgreSQL URL is invalid: use postgres://user:password@host:5432/dbname in --pg-url (CDC_ROUTER_PG_URL)")
	}
	delete(cfg.RuntimeParams, "replication")
	cfg.RuntimeParams["application_name"] = "cdc-router"
	cfg.RuntimeParams["client_encoding"] = "UTF8" // quarantine values are UTF-8 whatever the database's encoding
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, explainConnect(err, hostOf(&cfg.Config))
	}
	return conn, nil
}
