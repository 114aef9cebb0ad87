package e2e

import (
	"context"
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/internal/testenv"
)

// expectOneSentence runs a command and expects a failure whose message contains want and is one line.
func (e *env) expectOneSentence(want string, args ...string) {
	e.t.Helper()
	out, code := e.cli(args...)
	out = strings.TrimSpace(out)
	lines := strings.Split(out, "\n")
	last := lines[len(lines)-1]
	if code == 0 || !strings.Contains(last, want) {
		e.t.Fatalf("%v: exit %d, output:\n%s\nwant a failure saying %q", args, code, out, want)
	}
	if strings.Contains(out, "goroutine ") || strings.Contains(out, "secret") {
		e.t.Fatalf("%v: output has a stack or a password:\n%s", args, out)
	}
	e.t.Logf("%s", last)
}

func TestUserErrorsNameTheFix(t *testing.T) {
	e := newStreamEnv(t)
	base, _ := url.Parse(e.pgURL)
	t.Run("bad URL", func(t *testing.T) {
		e.t = t
		e.expectOneSentence("PostgreSQL URL is invalid", "status", "--pg-url", "postgres://u:secret@host:notaport/db")
	})
	t.Run("nothing listening", func(t *testing.T) {
		e.t = t
		e.expectOneSentence("cannot reach PostgreSQL", "status", "--pg-url", "postgres://u:secret@127.0.0.1:1/db")
	})
	t.Run("missing table", func(t *testing.T) {
		e.t = t
		e.expectOneSentence("cdc-router migrate", "run", "--slot", e.slot, "--table", "public.nope")
	})
	t.Run("wrong column type", func(t *testing.T) {
		e.t = t
		e.exec(`CREATE TABLE bad_outbox (LIKE outbox)`)
		e.exec(`ALTER TABLE bad_outbox ALTER COLUMN payload TYPE text`)
		e.expectOneSentence("column payload is text", "run", "--slot", e.slot, "--table", "public.bad_outbox")
	})
	t.Run("no REPLICATION right", func(t *testing.T) {
		e.t = t
		e.exec(`CREATE ROLE app_no_repl LOGIN PASSWORD 'secret'`)
		e.exec(`GRANT USAGE ON SCHEMA cdc_router TO app_no_repl`)
		e.exec(`GRANT SELECT ON ALL TABLES IN SCHEMA cdc_router, public TO app_no_repl`)
		u := *base
		u.User = url.UserPassword("app_no_repl", "secret")
		e.expectOneSentence("ALTER ROLE", "run", "--slot", e.slot, "--pg-url", u.String())
	})
	t.Run("bad AMQP URL", func(t *testing.T) {
		e.t = t
		e.expectOneSentence("AMQP URL", "run", "--slot", e.slot, "--amqp-url", "http://guest:secret@x")
	})
	t.Run("exchange declared with other arguments", func(t *testing.T) {
		e.t = t
		ch := e.channel()
		name := e.exchange + "_plain"
		if err := ch.ExchangeDeclare(name, "topic", true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		defer func() {
			ch.ExchangeDelete(name, false, false)
			ch.ExchangeDelete(name+".unroutable", false, false)
			ch.QueueDelete(name+".unroutable", false, false, false)
		}()
		e.expectOneSentence("--no-alternate-exchange", "run", "--slot", e.slot, "--exchange", name)
	})
}

func TestWalLevelNotLogicalNamesTheFix(t *testing.T) {
	replica, err := testenv.StartPostgres("wal_level=replica")
	if err != nil {
		t.Fatal(err)
	}
	defer replica.Close()
	ctx := context.Background()
	url := replica.NewDatabase(t)
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	c.Close(ctx)
	e := &env{t: t, pgURL: url, amqpURL: testenv.AMQPURL(t)}
	e.expectOneSentence("wal_level", "run", "--slot", "s1")
}

func TestMigrateWithInboxIsIdempotent(t *testing.T) {
	e := newEnv(t)
	for i := 0; i < 2; i++ {
		out, code := e.cli("migrate", "--inbox")
		if code != 0 || !strings.Contains(out, "inbox schema inbox") {
			t.Fatalf("migrate --inbox #%d: exit %d\n%s", i+1, code, out)
		}
	}
	if n := e.scalar(`SELECT count(*)::text FROM information_schema.tables WHERE table_schema = 'inbox'`); n == "0" {
		t.Fatal("no inbox tables")
	}
}
