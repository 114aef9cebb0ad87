package e2e

import (
	"context"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// setupStatement matches the SQL the docs hand an operator to set roles and rights up: role setup, grants,
// revokes, ownership and the hardening of emit.
var setupStatement = regexp.MustCompile(`(?m)^\s*(CREATE ROLE|GRANT|REVOKE|ALTER (ROLE|SCHEMA|TABLE|FUNCTION)|DO \$\$)`)

// docStep is one thing a doc tells the operator to run: an SQL block, or the arguments of a cdc-router
// command from a shell block.
type docStep struct {
	sql  string
	args []string
}

// docSteps are the setup SQL blocks (those holding a setupStatement) and the `cdc-router migrate` lines of
// the shell blocks of doc, from the heading starting with section (all of doc when empty) to the next
// heading of the same level, in the doc's order. Fences may be indented, as in README.md's numbered steps.
func docSteps(t *testing.T, doc, section string) []docStep {
	t.Helper()
	b, err := os.ReadFile("../" + doc)
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	if section != "" {
		at := strings.Index(text, "\n"+section)
		if at < 0 {
			t.Fatalf("%s has no section %q", doc, section)
		}
		level := section[:strings.Index(section, " ")+1]
		text = text[at+1:]
		if end := strings.Index(text[1:], "\n"+level); end >= 0 {
			text = text[:end+1]
		}
	}
	var steps []docStep
	fence := regexp.MustCompile("(?ms)^( *)```(sql|sh)\n(.*?)^ *```")
	for _, m := range fence.FindAllStringSubmatch(text, -1) {
		body := regexp.MustCompile("(?m)^"+m[1]).ReplaceAllString(m[3], "")
		switch {
		case m[2] == "sql" && setupStatement.MatchString(body):
			steps = append(steps, docStep{sql: body})
		case m[2] == "sh":
			for _, line := range strings.Split(body, "\n") {
				if cmd, _, _ := strings.Cut(line, "#"); strings.HasPrefix(cmd, "cdc-router migrate") {
					steps = append(steps, docStep{args: strings.Fields(cmd)[1:]})
				}
			}
		}
	}
	return steps
}

// TestDocumentedSetupSQLRuns runs, on the server under test (the matrix runs it on PostgreSQL 14, 17 and
// 18), every setup statement the docs give: migrate and the router's role and grants of README.md steps 1-2 and of
// docs/howto/set-up-the-database.md, then the writer's role, `migrate --emit-function --emit-role`, the grant of the emit
// key and the optional revoke of pg_logical_emit_message of docs/producers.md, as written. Then the router
// runs as that role with --message-prefix and publishes the writer's emitted event, and no signature of
// pg_logical_emit_message is left executable by PUBLIC.
func TestDocumentedSetupSQLRuns(t *testing.T) {
	emitSteps := docSteps(t, "docs/producers.md", "## Without a table")
	if len(emitSteps) != 4 {
		t.Fatalf("docs/producers.md's emit section has %d setup steps, want 4 (the writer's role, migrate, the key's "+
			"grant, the revoke): update this test with the docs", len(emitSteps))
	}
	for _, doc := range []struct {
		path, section string
		blocks        int
	}{
		{"README.md", "## Use it with your database", 2},
		{"docs/howto/set-up-the-database.md", "## Database role and access", 2},
	} {
		t.Run(doc.path, func(t *testing.T) {
			steps := docSteps(t, doc.path, doc.section)
			if len(steps) != doc.blocks {
				t.Fatalf("%s's %s has %d setup steps, want %d: update this test with the docs", doc.path, doc.section, len(steps), doc.blocks)
			}
			runDocumentedSetup(t, append(steps, emitSteps...))
		})
	}
}

// runDocumentedSetup runs steps on a fresh database as its owner (the test's superuser), dropping the roles
// they create at the end, then checks the router and the writer they set up. A migrate step's --amqp-url is
// left out: the broker is shared, and the env declared the test's own exchange.
func runDocumentedSetup(t *testing.T, steps []docStep) {
	ctx := context.Background()
	e := newStreamEnv(t)
	for _, s := range steps {
		for _, m := range regexp.MustCompile(`CREATE ROLE (\w+)`).FindAllStringSubmatch(s.sql, -1) {
			t.Cleanup(func() {
				e.db.Exec(ctx, `DROP OWNED BY `+m[1])
				e.db.Exec(ctx, `DROP ROLE `+m[1])
			})
		}
		if s.args != nil {
			if i := slices.Index(s.args, "--amqp-url"); i >= 0 { // the shared broker: the env declared the test's exchange
				s.args = slices.Delete(slices.Clone(s.args), i, i+2)
			}
			if out, code := e.cli(s.args...); code != 0 {
				t.Fatalf("cdc-router %s: exit %d:\n%s", strings.Join(s.args, " "), code, out)
			}
			continue
		}
		if _, err := e.db.Exec(ctx, s.sql); err != nil {
			t.Fatalf("the documented SQL fails on this server: %v\n%s", err, s.sql)
		}
	}
	var public int
	if err := e.db.QueryRow(ctx, `SELECT count(*) FROM pg_proc p, aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
		WHERE p.proname = 'pg_logical_emit_message' AND a.grantee = 0`).Scan(&public); err != nil || public != 0 {
		t.Errorf("%d signatures of pg_logical_emit_message are still executable by PUBLIC (%v)", public, err)
	}

	c := e.consume(e.queue)
	e.as(roleURL(t, e.pgURL, "cdc_router")).startStreaming("--message-prefix", "cdc-router.outbox")
	writer, err := pgx.Connect(ctx, roleURL(t, e.pgURL, "orders_service"))
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Close(ctx)
	var id string
	if err := writer.QueryRow(ctx, `SELECT cdc_router.emit('order', '42', 1, 'paid', '{"order_id": 42}')::text`).Scan(&id); err != nil {
		t.Fatalf("the documented writer cannot emit: %v", err)
	}
	if _, err := writer.Exec(ctx, `SELECT pg_logical_emit_message(true, 'cdc-router.outbox', '{}')`); err == nil ||
		!strings.Contains(err.Error(), "permission denied") {
		t.Errorf("after the documented revoke the writer still calls pg_logical_emit_message directly: %v", err)
	}
	c.waitFor(t, []row{{id: id}}, 60*time.Second)
}

// roleURL is url with the documented role and password.
func roleURL(t *testing.T, pgURL, role string) string {
	u, err := url.Parse(pgURL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(role, "secret")
	return u.String()
}
