package main

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/cdc-router/cdc-router/internal/testenv"
)

// runCLI runs cli in-process with the given environment and returns stdout, stderr and the exit code.
func runCLI(t *testing.T, env map[string]string, args ...string) (string, string, int) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := cli(context.Background(), args, func(k string) string { return env[k] }, &stdout, &stderr)
	return stdout.String(), stderr.String(), code
}

func TestHelpGoesToStdoutWithExitZero(t *testing.T) {
	for _, cmd := range []string{"run", "migrate", "status", "backfill", "reset", "version"} {
		for _, flag := range []string{"--help", "-h"} {
			stdout, stderr, code := runCLI(t, nil, cmd, flag)
			if code != 0 || !strings.Contains(stdout, "Usage of cdc-router "+cmd) || stderr != "" {
				t.Errorf("%s %s: exit %d, stdout %q, stderr %q; want the flag list on stdout and exit 0",
					cmd, flag, code, stdout, stderr)
			}
		}
	}
	stdout, _, code := runCLI(t, nil, "run", "--help")
	if code != 0 || !strings.Contains(stdout, "-lanes") || !strings.Contains(stdout, "CDC_ROUTER_LANES") {
		t.Errorf("run --help does not list --lanes:\n%s", stdout)
	}
	stdout, _, code = runCLI(t, nil, "--help")
	if code != 0 || !strings.Contains(stdout, "Commands:") {
		t.Errorf("--help: exit %d\n%s", code, stdout)
	}
}

func TestBadFlagIsOneLineOnStderr(t *testing.T) {
	stdout, stderr, code := runCLI(t, nil, "run", "--no-such-flag")
	if code != 2 || stdout != "" || strings.Count(strings.TrimSpace(stderr), "\n") != 0 ||
		!strings.Contains(stderr, "no-such-flag") || !strings.Contains(stderr, "--help") {
		t.Errorf("exit %d, stdout %q, stderr %q; want one line naming the flag and --help, exit 2", code, stdout, stderr)
	}
}

func TestZeroLanesAndWindowAreUsageErrors(t *testing.T) {
	env := map[string]string{"CDC_ROUTER_PG_URL": "postgres://u@127.0.0.1:1/db"}
	for _, c := range []struct{ args []string }{
		{[]string{"run", "--lanes", "0"}},
		{[]string{"run", "--window", "0"}},
		{[]string{"run", "--lanes", "-3"}},
	} {
		_, stderr, code := runCLI(t, env, c.args...)
		if code != 2 || !strings.Contains(stderr, c.args[1]+" ") || !strings.Contains(stderr, "use 1 or more") {
			t.Errorf("%v: exit %d, stderr %q; want a usage error naming %s and its range", c.args, code, stderr, c.args[1])
		}
	}
	_, stderr, code := runCLI(t, map[string]string{"CDC_ROUTER_PG_URL": env["CDC_ROUTER_PG_URL"], "CDC_ROUTER_WINDOW": "0"}, "run")
	if code != 2 || !strings.Contains(stderr, "--window 0 (CDC_ROUTER_WINDOW)") {
		t.Errorf("CDC_ROUTER_WINDOW=0: exit %d, stderr %q", code, stderr)
	}
}

func TestBadEnvironmentValueNamesTheVariableAndTheForm(t *testing.T) {
	cases := map[string]string{
		"CDC_ROUTER_LANES":                 "a whole number",
		"CDC_ROUTER_SHUTDOWN_TIMEOUT":      "a duration such as 30s",
		"CDC_ROUTER_NO_ALTERNATE_EXCHANGE": "true or false",
	}
	for name, want := range cases {
		_, stderr, code := runCLI(t, map[string]string{name: "abc"}, "run")
		if code != 2 || !strings.Contains(stderr, name+`="abc" is not `+want) {
			t.Errorf("%s=abc: exit %d, stderr %q; want it to say the variable, the value and %q", name, code, stderr, want)
		}
	}
}

func TestPositionalURLIsNotEchoedWithItsPassword(t *testing.T) {
	for _, arg := range []string{
		"postgres://app:s3cret@db.example:5432/app?sslmode=verify-full",
		"postgres://app:s3cret@db.example:notaport/app",
		"host=db.example user=app password=s3cret",
		"amqps://app:s3cret@mq.example/vhost",
	} {
		_, stderr, code := runCLI(t, nil, "status", arg)
		if code != 2 || strings.Contains(stderr, "s3cret") || !strings.Contains(stderr, "--pg-url") {
			t.Errorf("%q: exit %d, stderr %q; want a usage error without the password", arg, code, stderr)
		}
	}
	_, stderr, _ := runCLI(t, nil, "status", "postgres://app:s3cret@db.example/app")
	if !strings.Contains(stderr, "postgres://app:xxxxx@db.example/app") {
		t.Errorf("stderr %q: want the URL with its password replaced", stderr)
	}
}

func TestJSONLogsWriteDurationsAsText(t *testing.T) {
	var b bytes.Buffer
	log, err := newLogger(&b, "info", "json")
	if err != nil {
		t.Fatal(err)
	}
	log.Info("x", "backoff", 1500*time.Millisecond, "transaction_age", 2*time.Minute, "took", "4ms")
	out := b.String()
	for _, want := range []string{`"backoff":"1.5s"`, `"transaction_age":"2m0s"`, `"took":"4ms"`} {
		if !strings.Contains(out, want) {
			t.Errorf("log line %s lacks %s", out, want)
		}
	}
}

// TestStartupRetryGivesUpAfterThirtySeconds: the documented 30 s of start-up retries end within a second of
// 30 s, not up to a whole backoff later.
func TestStartupRetryGivesUpAfterThirtySeconds(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(testenv.Router(t, ""), "run", "--pg-url", "postgres://u:secret@127.0.0.1:1/db", "--slot", "grace")
	began := time.Now()
	out, _ := cmd.CombinedOutput()
	took := time.Since(began)
	if cmd.ProcessState.ExitCode() != 1 || !strings.Contains(string(out), "cannot reach PostgreSQL") {
		t.Fatalf("exit %d after %v:\n%s", cmd.ProcessState.ExitCode(), took, out)
	}
	if took < 29*time.Second || took > 31*time.Second {
		t.Errorf("gave up after %v, want 30 s ± 1", took)
	}
	t.Logf("gave up after %v", took.Round(10*time.Millisecond))
}
