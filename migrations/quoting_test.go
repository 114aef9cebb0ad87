package migrations

import (
	"strings"
	"testing"
)

// TestNamesCannotEndADoBody renders the migrations with names that hold dollar-quote delimiters: each DO
// body must then be delimited by a tag that no name holds, so the tag occurs exactly twice in the statement.
// A new SQL file with a DO body writes DO {{.Dollar}} ... {{.Dollar}}; instead of $$.
func TestNamesCannotEndADoBody(t *testing.T) {
	stmts, err := Statements(Config{Publication: `p$$x`, Schema: `S$$$cdc_router_0$`, Table: `public.t$$`})
	if err != nil {
		t.Fatal(err)
	}
	dos := 0
	for _, s := range stmts {
		i := strings.Index(s, "DO $")
		if i < 0 {
			continue
		}
		dos++
		tag := strings.Fields(s[i+3:])[0]
		if n := strings.Count(s, tag); n != 2 || tag == "$$" {
			t.Errorf("DO body delimited by %s, which occurs %d times (a name holds it): write DO {{.Dollar}} "+
				"... {{.Dollar}}; in the SQL file:\n%s", tag, n, s)
		}
	}
	if dos < 2 {
		t.Errorf("%d DO bodies, want at least 2 (003 and 005)", dos)
	}
	plain, err := Statements(Config{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(plain, "\n"), "DO $$") {
		t.Error("plain names should keep the $$ delimiter")
	}
}

// TestExpectedColumnsNameEveryColumn: the table-shape refusal lists the columns itself instead of pointing to
// a source file that binary and image users do not have.
func TestExpectedColumnsNameEveryColumn(t *testing.T) {
	got := expectedColumns()
	if len(columnOrder) != len(columnTypes) {
		t.Fatalf("columnOrder has %d columns, columnTypes %d", len(columnOrder), len(columnTypes))
	}
	for name := range columnTypes {
		if !strings.Contains(got, name+" ") {
			t.Errorf("expected columns %q lack %s", got, name)
		}
	}
	if !strings.Contains(got, "payload jsonb|json") || strings.Contains(got, ".sql") {
		t.Errorf("expected columns = %q", got)
	}
}
