package doctest

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/internal/testenv"
)

// pageTimeout bounds one page's shell; a page that waits on something the docs never start fails here.
const pageTimeout = 3 * time.Minute

// notRun are the pages whose blocks this test leaves alone, with the reason.
var notRun = map[string]string{
	"docs/testing.md": "its blocks run the invariant harness (make chaos), minutes per seed; CI runs its seeds in make test",
}

// TestDocsRunAsWritten runs each page's blocks in order (see the package doc), the pages side by side.
func TestDocsRunAsWritten(t *testing.T) {
	root := moduleRoot(t)
	router := testenv.Router(t, "")
	parsed := map[string][]block{}
	var programs []block // every page's programs, which any page may go run
	for _, rel := range pages(t, root) {
		if _, ok := notRun[rel]; ok {
			continue
		}
		blocks, err := parsePage(root, rel)
		if err != nil {
			t.Fatal(err)
		}
		parsed[rel] = blocks
		for _, b := range blocks {
			if b.program != "" && b.skip == "" {
				programs = append(programs, b)
			}
		}
	}
	programBin := buildPrograms(t, root, programs)
	// The pages run side by side, more of them than -parallel would allow: they mostly wait on servers.
	// t.Run may be called from several goroutines at once.
	var wg sync.WaitGroup
	slots := make(chan struct{}, pagesAtOnce)
	for _, rel := range pages(t, root) {
		if reason, ok := notRun[rel]; ok {
			t.Logf("%s is not run: %s", rel, reason)
			continue
		}
		blocks := parsed[rel]
		runs := false
		for _, b := range blocks {
			runs = runs || b.runnable()
		}
		if !runs {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			slots <- struct{}{}
			defer func() { <-slots }()
			t.Run(rel, func(t *testing.T) { runPage(t, root, router, programBin, rel, blocks) })
		}()
	}
	wg.Wait()
}

// pagesAtOnce bounds the pages that run at the same time, each with a PostgreSQL cluster of its own.
const pagesAtOnce = 4

func runPage(t *testing.T, root, router, programBin, rel string, blocks []block) {
	ctx := context.Background()
	pg, err := testenv.StartPostgres()
	if err != nil {
		t.Fatalf("the docs test needs PostgreSQL: %v", err)
	}
	t.Cleanup(pg.Close)
	admin, err := pgx.Connect(ctx, pg.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{`CREATE ROLE app_owner LOGIN`, `CREATE DATABASE app OWNER app_owner`} {
		if _, err := admin.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	admin.Close(ctx)

	broker, err := url.Parse(testenv.AMQPURL(t))
	if err != nil {
		t.Fatal(err)
	}
	vhost := testenv.Name(t)
	broker.Path = "/" + vhost
	amqpURL := broker.String()
	ctl := func(args ...string) {
		if out, err := testenv.Rabbitmqctl(t, args...).CombinedOutput(); err != nil {
			t.Fatalf("rabbitmqctl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	ctl("add_vhost", vhost)
	t.Cleanup(func() { _ = testenv.Rabbitmqctl(t, "delete_vhost", vhost).Run() })
	ctl("set_permissions", "-p", vhost, "guest", ".*", ".*", ".*")

	work, err := os.MkdirTemp("", "cdc-router-doctest-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(work) })
	bin := filepath.Join(work, ".bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(router, filepath.Join(bin, "cdc-router")); err != nil {
		t.Fatal(err)
	}

	rw := rewriter(pg.Port, amqpURL, work)
	script := prelude + pageScript(blocks, rw)
	if err := os.WriteFile(filepath.Join(work, "page.sh"), []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	pgBin, err := pgBinDir()
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, pageTimeout)
	defer cancel()
	cmd := exec.CommandContext(cctx, "bash", "page.sh")
	cmd.Dir = work
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.Env = append(cleanEnv(),
		"PATH="+bin+":"+pgBin+":"+os.Getenv("PATH"),
		"PGHOST=127.0.0.1", "PGPORT="+strconv.Itoa(pg.Port), "PGUSER=postgres", "PGDATABASE=app",
		"DOCS_WORKDIR="+work, "DOCS_PROGRAMS="+programBin, "DOCS_RABBITMQCTL="+testenv.Rabbitmqctl(t).Path, "DOCS_VHOST="+vhost, "DOCS_AMQP_URL="+amqpURL)
	// Output goes to a file, not a pipe: what the page leaves running in the background keeps a pipe open,
	// and a file lets Run return when bash does. The group is killed right after, and at cleanup.
	outPath := filepath.Join(work, "page.out")
	outFile, err := os.Create(outPath)
	if err != nil {
		t.Fatal(err)
	}
	defer outFile.Close()
	cmd.Stdout, cmd.Stderr = outFile, outFile
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	err = cmd.Wait()
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) // what the page left running in the background
	out, _ := os.ReadFile(outPath)
	if err != nil {
		t.Fatalf("%s does not run as written (%v after %s):\n%s", rel, err, time.Since(start).Round(time.Millisecond), testenv.Tail(string(out), 60))
	}
	t.Logf("%s ran in %s", rel, time.Since(start).Round(time.Millisecond))
}

// buildPrograms vets and builds each program block once, in a dot folder of the module (which ./... leaves
// out) so that it builds against this module's packages, and returns the folder of the binaries: a page's
// `go run ./NAME` runs the binary NAME built from the same text.
func buildPrograms(t *testing.T, root string, programs []block) string {
	t.Helper()
	bin := t.TempDir()
	src, err := os.MkdirTemp(root, ".doctest-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(src)
	for _, b := range programs {
		dir := filepath.Join(src, b.program)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(b.body), 0o644); err != nil {
			t.Fatal(err)
		}
		pkg := "./" + filepath.Base(src) + "/" + b.program
		for _, args := range [][]string{{"vet", pkg}, {"build", "-o", filepath.Join(bin, b.program), pkg}} {
			cmd := exec.Command("go", args...)
			cmd.Dir = root
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("%s: the program %s does not build (go %s): %v\n%s", b.where(), b.program, args[0], err, out)
				break
			}
		}
	}
	return bin
}

// cleanEnv is the test's environment without the settings of cdc-router and libpq, which the page sets.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "CDC_ROUTER_") || strings.HasPrefix(kv, "PG") || strings.HasPrefix(kv, "PATH=") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// pgBinDir is where psql and the server binaries are.
func pgBinDir() (string, error) {
	if d := os.Getenv("CDC_ROUTER_TEST_PG_BIN"); d != "" {
		return d, nil
	}
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		return strings.TrimSpace(string(out)), nil
	}
	m, _ := filepath.Glob("/usr/lib/postgresql/*/bin/psql")
	if len(m) == 0 {
		return "", fmt.Errorf("psql not found")
	}
	return filepath.Dir(m[len(m)-1]), nil
}

var amqpHost = regexp.MustCompile(`amqp://[^@\s'"]*@(rabbitmq|mq):5672/`)

// rewriter adapts hosts and ports only: the docs' PostgreSQL host db, their broker host rabbitmq or mq
// (with the test broker's credentials and the page's vhost) and /etc/cdc-router/.
func rewriter(pgPort int, amqpURL, work string) func(string) string {
	return func(s string) string {
		s = strings.ReplaceAll(s, "@db:5432", "@127.0.0.1:"+strconv.Itoa(pgPort))
		s = amqpHost.ReplaceAllLiteralString(s, amqpURL)
		s = strings.ReplaceAll(s, `http-addr: ":8080"`, `http-addr: "127.0.0.1:0"`)
		return strings.ReplaceAll(s, "/etc/cdc-router/", work+"/etc/cdc-router/")
	}
}

// pageScript is the page's runnable blocks as one bash script, each announced by its place in the page.
func pageScript(blocks []block, rw func(string) string) string {
	var s strings.Builder
	for _, b := range blocks {
		if !b.runnable() {
			continue
		}
		fmt.Fprintf(&s, "\n__docs_block=%q\n", b.where())
		body := rw(b.body)
		switch {
		case b.file != "":
			path := rw(b.file)
			fmt.Fprintf(&s, "mkdir -p \"$(dirname %q)\"\ncat > %q <<'__DOCS_FILE__'\n%s__DOCS_FILE__\n", path, path, body)
		case b.lang == "go":
			// vetted before the page runs; the page may `go run` it
		case b.lang == "sql":
			db := b.db
			if db == "" {
				db = "app"
			}
			if b.empty {
				fmt.Fprintf(&s, "__docs_out=$(psql -X -v ON_ERROR_STOP=1 -q -d %q <<'__DOCS_SQL__'\n%s__DOCS_SQL__\n)\n__docs_expect_empty \"$__docs_out\"\n", db, body)
			} else {
				fmt.Fprintf(&s, "psql -X -v ON_ERROR_STOP=1 -q -d %q <<'__DOCS_SQL__'\n%s__DOCS_SQL__\n", db, body)
			}
		case b.empty:
			fmt.Fprintf(&s, "__docs_out=$(\n%s)\n__docs_expect_empty \"$__docs_out\"\n", body)
		default:
			s.WriteString(body)
		}
	}
	s.WriteString("\n__docs_block=end\n")
	return s.String()
}

// prelude defines what the page's shell runs with: stop on the first failure, cdc-router run in the
// background until it streams, and the helpers of hidden blocks.
const prelude = `set -eo pipefail
__docs_block=start
__docs_router_pid=
__docs_n=0
__docs_log=
__docs_stop_router() {
	if [ -n "$__docs_router_pid" ]; then
		kill -TERM "$__docs_router_pid" 2>/dev/null || true
		wait "$__docs_router_pid" 2>/dev/null || true
		__docs_router_pid=
	fi
}
__docs_exit() {
	local rc=$?
	__docs_stop_router
	if [ "$rc" -ne 0 ]; then
		echo "docs-test: the block at $__docs_block failed (exit $rc)"
	fi
	exit "$rc"
}
trap __docs_exit EXIT
__docs_run() {
	__docs_stop_router
	__docs_n=$((__docs_n + 1))
	__docs_log="$DOCS_WORKDIR/router-$__docs_n.log"
	command cdc-router "$@" >"$__docs_log" 2>&1 &
	__docs_router_pid=$!
	local i rc
	for i in $(seq 300); do
		if grep -qE 'msg=streaming |"msg":"streaming"' "$__docs_log"; then return 0; fi
		if ! kill -0 "$__docs_router_pid" 2>/dev/null; then
			rc=0; wait "$__docs_router_pid" || rc=$?
			__docs_router_pid=
			echo "docs-test: cdc-router $* exited ($rc) before it streamed:"; cat "$__docs_log"
			return 1
		fi
		sleep 0.1
	done
	echo "docs-test: cdc-router $* did not stream within 30 s:"; cat "$__docs_log"
	return 1
}
go() { # go run ./NAME of a program block runs the binary built from it
	if [ "$1" = run ] && [ -x "$DOCS_PROGRAMS/${2#./}" ]; then
		local p="$DOCS_PROGRAMS/${2#./}"
		shift 2
		"$p" "$@"
		return
	fi
	command go "$@"
}
cdc-router() {
	if [ "$1" = run ] && [[ " $* " != *" --help "* && " $* " != *" --print-config "* ]]; then
		__docs_run "$@"
		return
	fi
	command cdc-router "$@"
}
__docs_expect_empty() {
	echo "$1"
	if echo "$1" | grep -E '^\([0-9]+ rows?\)$' | grep -vq '^(0 rows)$'; then
		echo "docs-test: expected no rows"
		return 1
	fi
}
docs_until_sql() {
	local i
	for i in $(seq 300); do
		if [ "$(psql -XtAq -d "$1" -c "$2" 2>/dev/null)" = t ]; then return 0; fi
		sleep 0.1
	done
	echo "docs-test: not true within 30 s in database $1: $2"
	psql -X -d "$1" -c "$2" || true
	return 1
}
docs_until_queue() { # QUEUE N: wait until queue QUEUE of the page's vhost holds N messages
	local i
	for i in $(seq 30); do
		if "$DOCS_RABBITMQCTL" list_queues -q -p "$DOCS_VHOST" name messages | grep -qE "^$1\s+$2\$"; then return 0; fi
		sleep 1
	done
	echo "docs-test: queue $1 does not hold $2 messages within 30 s:"; "$DOCS_RABBITMQCTL" list_queues -q -p "$DOCS_VHOST" name messages
	return 1
}
docs_readme_setup() { # README's "Use it with your database" steps 1 and 2 (migrate with these arguments), then step 3's URLs exported
	CDC_ROUTER_PG_URL="postgres://app_owner@127.0.0.1:$PGPORT/app" CDC_ROUTER_AMQP_URL="$DOCS_AMQP_URL" \
		command cdc-router migrate "$@" >/dev/null
	psql -Xq -v ON_ERROR_STOP=1 <<'__DOCS_SQL__'
CREATE ROLE cdc_router LOGIN REPLICATION PASSWORD 'secret';
GRANT USAGE ON SCHEMA public TO cdc_router;
GRANT SELECT ON public.outbox TO cdc_router;
GRANT USAGE ON SCHEMA cdc_router TO cdc_router;
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA cdc_router TO cdc_router;
GRANT USAGE ON ALL SEQUENCES IN SCHEMA cdc_router TO cdc_router;
__DOCS_SQL__
	export CDC_ROUTER_PG_URL="postgres://cdc_router:secret@127.0.0.1:$PGPORT/app" CDC_ROUTER_AMQP_URL="$DOCS_AMQP_URL"
}
docs_wait_log() {
	local i
	for i in $(seq 300); do
		if grep -qF -- "$1" "$__docs_log"; then return 0; fi
		sleep 0.1
	done
	echo "docs-test: the router did not log $1 within 30 s:"; cat "$__docs_log"
	return 1
}
`
