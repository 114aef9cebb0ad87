package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"

	"github.com/cdc-router/cdc-router/decode"
	"github.com/cdc-router/cdc-router/replication"
	"github.com/cdc-router/cdc-router/route"
	"github.com/cdc-router/cdc-router/snapshot"
)

func runBackfill(ctx context.Context, args []string, env func(string) string, stdout, stderr io.Writer) error {
	s := newSettings("backfill", env, stderr)
	pg := addPGFlags(s)
	amqpURL := s.String("amqp-url", "amqp://guest:guest@localhost:5672/", "RabbitMQ URL, amqp://user:password@host:5672/vhost")
	where := s.String("where", "", "SQL predicate choosing the rows to publish again, e.g. \"occurred_at >= '2026-11-01'\" (required; use 'true' for all)")
	exchange := s.String("exchange", route.DefaultExchange, "exchange to publish to (declared as run declares it)")
	alternate := s.String("alternate-exchange", "", "alternate exchange of --exchange, as given to run (default <exchange>.unroutable)")
	noAlternate := s.Bool("no-alternate-exchange", false, "the exchange has no alternate exchange (as with run --no-alternate-exchange)")
	rate := s.Int("rate", 0, "rows per second at most (0: as fast as confirms allow)")
	name := s.String("name", "", "name of this backfill, to resume it after a crash (default: derived from --where and --exchange)")
	restart := s.Bool("restart", false, "run a finished backfill of the same name again")
	maxPayload := s.Int("max-payload-bytes", 8<<20, "larger payloads are quarantined instead of published")
	logLevel := s.String("log-level", "info", "debug, info, warn or error")
	logFormat := s.String("log-format", "text", "text or json")
	if err := parse(s, args); err != nil {
		return err
	}
	if err := requireURL(pg); err != nil {
		return err
	}
	if *where == "" {
		return usageError{fmt.Errorf("--where is required: say which rows to publish again (use --where true for all)")}
	}
	if *name == "" {
		sum := sha256.Sum256([]byte(*where + "\x00" + *exchange))
		*name = hex.EncodeToString(sum[:6])
	}
	log, err := newLogger(stderr, *logLevel, *logFormat)
	if err != nil {
		return err
	}
	read, err := replication.ConnectReader(ctx, *pg.url)
	if err != nil {
		return err
	}
	defer read.Close(context.Background())
	state, err := replication.ConnectSQL(ctx, *pg.url)
	if err != nil {
		return err
	}
	defer state.Close(context.Background())
	r, err := route.Dial(ctx, route.Config{URL: *amqpURL, Exchange: *exchange, AlternateExchange: *alternate, NoAlternateExchange: *noAlternate,
		ConnectionName: "cdc-router backfill"}, log)
	if err != nil {
		return err
	}
	defer r.Close()
	cfg := snapshot.Config{Table: *pg.table, Schema: *pg.schema, Slot: "backfill:" + *name, Where: *where, Rate: float64(*rate),
		Decode: decode.Config{Table: *pg.table, MaxPayloadBytes: *maxPayload, Check: route.Check}}
	job, err := snapshot.Backfill(ctx, cfg, read, state, *name, *restart, r, log, terminal(stderr))
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "backfill %s done: %d rows published to %s\n", *name, job.RowsDone, *exchange)
	return nil
}

// terminal returns w when it is a terminal (for progress lines), nil otherwise.
func terminal(w io.Writer) io.Writer {
	f, ok := w.(*os.File)
	if !ok {
		return nil
	}
	st, err := f.Stat()
	if err != nil || st.Mode()&os.ModeCharDevice == 0 {
		return nil
	}
	return w
}
