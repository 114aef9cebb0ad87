package migrations

import (
	"strings"
	"testing"
)

// TestCheckNamesConfigForAnotherShape: a table of Debezium's outbox shape (id, aggregatetype, aggregateid,
// type, payload) is refused as not native, naming --config and the page that shows the file, which is what
// its user needs, before the ALTER that would make it native. A native table that lost a column is refused
// with the ALTER alone.
func TestCheckNamesConfigForAnotherShape(t *testing.T) {
	c := connect(t)
	exec(t, c, `CREATE TABLE public.outbox_events (id uuid PRIMARY KEY, aggregatetype varchar(255) NOT NULL,
		aggregateid varchar(255) NOT NULL, type varchar(255) NOT NULL, payload jsonb)`)
	msg := problem(t, c, Config{Table: "public.outbox_events"}, "does not have the expected shape", "--config",
		"docs/migrating-from-polling.md", "alter it to have the columns")
	if strings.Index(msg, "--config") > strings.Index(msg, "alter it to have the columns") {
		t.Errorf("%q names the ALTER before --config, for a table of another shape", msg)
	}

	native := migrated(t)
	exec(t, native, "ALTER TABLE outbox DROP COLUMN headers")
	if msg := problem(t, native, Config{}, "column headers is missing", "alter it to have the columns"); strings.Contains(msg, "--config") {
		t.Errorf("%q names --config for a native table that lost a column", msg)
	}
}
