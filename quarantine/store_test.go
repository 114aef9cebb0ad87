package quarantine

import (
	"context"
	"crypto/sha256"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cdc-router/cdc-router/internal/cdc"
	"github.com/cdc-router/cdc-router/internal/testenv"
	"github.com/cdc-router/cdc-router/migrations"
)

var pg *testenv.Postgres

func TestMain(m *testing.M) { testenv.Main(m, &pg) }

// database creates a migrated database (encoding "" means the cluster's UTF8) and connects to it with the
// URL parameters params.
func database(t *testing.T, encoding, params string) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	url := pg.NewDatabase(t)
	if encoding != "" {
		name := testenv.Name(t)
		admin, err := pgx.Connect(ctx, pg.URL("postgres"))
		if err != nil {
			t.Fatal(err)
		}
		_, err = admin.Exec(ctx, "CREATE DATABASE "+name+" ENCODING '"+encoding+"' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0")
		admin.Close(ctx)
		if err != nil {
			t.Fatal(err)
		}
		url = pg.URL(name)
	}
	c, err := pgx.Connect(ctx, url+params)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(ctx) })
	if err := migrations.Apply(ctx, c, migrations.Config{}); err != nil {
		t.Fatal(err)
	}
	return c
}

func count(t *testing.T, c *pgx.Conn) int {
	t.Helper()
	var n int
	if err := c.QueryRow(context.Background(), "SELECT count(*) FROM cdc_router.quarantine").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// bad is a row whose values hold everything that used to break the INSERT: a json value of 300 MB (only
// its prefix is ever held), bytes that are not UTF-8, U+2028/U+2029, a control character and NUL.
func bad(lsn cdc.LSN, ordinal int) cdc.Quarantined {
	prefix := []byte(`{"k":"x` + strings.Repeat("é", cdc.MaxStoredValue/2))[:cdc.MaxStoredValue]
	return cdc.Quarantined{LSN: lsn, Ordinal: ordinal, CommitLSN: lsn + 0x100, Table: "public.outbox",
		EventID: "ev\xff", Reason: "payload is 314572800 bytes\xc3\x28, over the limit",
		Columns: map[string]cdc.RawValue{
			"payload":     {Text: prefix, Size: 300 << 20, SHA256: sha256.Sum256([]byte("the whole value"))},
			"headers":     cdc.TextValue("{\"h\":\"\xff\xfe\u2028\u2029\x01\x00\"}"),
			"occurred_at": cdc.NullValue(),
		}}
}

// TestWriteCannotFailOnContent stores the bad row in full, in a UTF8 and in a SQL_ASCII database.
func TestWriteCannotFailOnContent(t *testing.T) {
	for _, encoding := range []string{"", "SQL_ASCII"} {
		t.Run("encoding "+encoding, func(t *testing.T) {
			ctx := context.Background()
			c := database(t, encoding, "")
			if err := NewStore(c, "cdc_router", "s").Write(ctx, bad(0x1000, 0)); err != nil {
				t.Fatalf("Write: %v", err)
			}
			var payload, headers, eventID, reason, notes string
			var occurred *string
			err := c.QueryRow(ctx, `SELECT row_values->>'payload', row_values->>'headers', row_values->>'occurred_at',
				event_id, reason, value_notes::text FROM cdc_router.quarantine`).
				Scan(&payload, &headers, &occurred, &eventID, &reason, &notes)
			if err != nil {
				t.Fatal(err)
			}
			if len(payload) != cdc.MaxStoredValue-1 || !strings.HasPrefix(payload, `{"k":"xé`) || occurred != nil {
				t.Errorf("payload of %d bytes, occurred_at %v", len(payload), occurred)
			}
			if want := "{\"h\":\"\uFFFD\uFFFD\u2028\u2029\x01\uFFFD\"}"; headers != want {
				t.Errorf("headers %q, want %q", headers, want)
			}
			if eventID != "ev\uFFFD" || reason != "payload is 314572800 bytes\uFFFD(, over the limit" {
				t.Errorf("event_id %q, reason %q", eventID, reason)
			}
			for _, want := range []string{`"payload": {"bytes": 314572800, "sha256": "`, `"truncated": true, "invalid_utf8": false}`,
				`"headers": {"bytes": 18, `, `"truncated": false, "invalid_utf8": true}`} {
				if !strings.Contains(notes, want) {
					t.Errorf("value_notes %s lacks %s", notes, want)
				}
			}
		})
	}
}

// TestRowsOfOneCopyHaveTheirOwnRecords: three rows at one position (a COPY), written twice (a replay),
// make three records; so do snapshot keys that used to be "type/id/version".
func TestRowsOfOneCopyHaveTheirOwnRecords(t *testing.T) {
	ctx := context.Background()
	c := database(t, "", "")
	s := NewStore(c, "cdc_router", "s")
	for replay := 0; replay < 2; replay++ {
		for ordinal := 0; ordinal < 3; ordinal++ {
			if err := s.Write(ctx, bad(0x5000, ordinal)); err != nil {
				t.Fatalf("replay %d, ordinal %d: %v", replay, ordinal, err)
			}
		}
		if n := count(t, c); n != 3 {
			t.Fatalf("after replay %d: %d records, want 3", replay, n)
		}
	}
	rows, _ := c.Query(ctx, "SELECT row_key FROM cdc_router.quarantine ORDER BY id")
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || strings.Join(keys, " ") != " #1 #2" {
		t.Fatalf("row keys %q, %v", keys, err)
	}

	for _, k := range []string{Key("a/b", "c", 1), Key("a", "b/c", 1), Key("a/b", "c", 1)} {
		if err := s.Write(ctx, cdc.Quarantined{LSN: 0x6000, RowKey: k, Table: "public.outbox", Reason: "bad"}); err != nil {
			t.Fatal(err)
		}
	}
	if n := count(t, c); n != 5 {
		t.Fatalf("%d records, want 5: the two snapshot keys must not collide", n)
	}
}

// TestMinimalRecord: when PostgreSQL refuses the values themselves, the position, key, event id and
// reason are stored with PostgreSQL's message, and a replay adds nothing.
func TestMinimalRecord(t *testing.T) {
	ctx := context.Background()
	t.Run("forced program limit", func(t *testing.T) {
		c := database(t, "", "")
		s := NewStore(c, "cdc_router", "s")
		s.failFull = func() error { return &pgconn.PgError{Code: "54000", Message: "forced limit"} }
		for i := 0; i < 2; i++ {
			if err := s.Write(ctx, bad(0x7000, 4)); err != nil {
				t.Fatalf("Write #%d: %v", i+1, err)
			}
		}
		checkMinimal(t, c, "#4", "ev\uFFFD", "forced limit")
	})
	// A server encoding that cannot take the text: in a LATIN1 database with client_encoding=UTF8 the
	// conversion fails (22P05), in an EUC_JP one (client_encoding defaults to it) UTF-8 bytes are not valid
	// EUC_JP (22021). First the values, then the reason, are refused; the ASCII minimal record goes in.
	for _, tc := range []struct{ encoding, params, message string }{
		{"LATIN1", "&client_encoding=UTF8", "has no equivalent in encoding"},
		{"EUC_JP", "", "invalid byte sequence for encoding"},
	} {
		t.Run(tc.encoding, func(t *testing.T) {
			c := database(t, tc.encoding, tc.params)
			s := NewStore(c, "cdc_router", "s")
			q := bad(0x8000, 0)
			q.Reason, q.EventID, q.RowKey = "aggregate_id \"日本\" is too long", "id-é", Key("日本🙂", "x", 1)
			for i := 0; i < 2; i++ {
				if err := s.Write(ctx, q); err != nil {
					t.Fatalf("Write #%d: %v", i+1, err)
				}
			}
			checkMinimal(t, c, `["\u65e5\u672c\ud83d\ude42","x",1]`, `id-\u{00E9}`, tc.message)
			var reason string
			c.QueryRow(ctx, "SELECT reason FROM cdc_router.quarantine").Scan(&reason)
			if reason != `aggregate_id "\u{65E5}\u{672C}" is too long` {
				t.Fatalf("reason %q", reason)
			}
		})
	}
}

func checkMinimal(t *testing.T, c *pgx.Conn, key, eventID, message string) {
	t.Helper()
	var rowKey, id, lsn, note string
	var values *string
	err := c.QueryRow(context.Background(), `SELECT row_key, event_id, lsn::text, row_values::text,
		value_notes->>'values_not_stored' FROM cdc_router.quarantine`).Scan(&rowKey, &id, &lsn, &values, &note)
	if err != nil {
		t.Fatal(err)
	}
	if n := count(t, c); n != 1 || rowKey != key || id != eventID || values != nil || !strings.Contains(note, message) {
		t.Fatalf("%d records; key %q, event_id %q, lsn %s, values %v, note %q", n, rowKey, id, lsn, values, note)
	}
}

// TestOtherErrorsAreReturned: a missing right is not the row's fault, so nothing is stored in its place.
func TestOtherErrorsAreReturned(t *testing.T) {
	ctx := context.Background()
	c := database(t, "", "")
	role := testenv.Name(t)
	if _, err := c.Exec(ctx, "CREATE ROLE "+role+"; GRANT USAGE ON SCHEMA cdc_router TO "+role+
		"; GRANT SELECT, INSERT ON cdc_router.quarantine TO "+role+"; SET ROLE "+role); err != nil {
		t.Fatal(err)
	}
	err := NewStore(c, "cdc_router", "s").Write(ctx, bad(0x9000, 0))
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "42501" || !strings.Contains(err.Error(), "quarantine_id_seq") {
		t.Fatalf("Write = %v, want the missing USAGE on the sequence", err)
	}
	if _, err := c.Exec(ctx, "RESET ROLE"); err != nil {
		t.Fatal(err)
	}
	if n := count(t, c); n != 0 {
		t.Fatalf("%d records, want none", n)
	}
}
