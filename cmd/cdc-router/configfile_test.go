package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// writeFile writes text to name in a directory of the test's own and returns its path.
func writeFile(t *testing.T, name, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// printed is `<command> --print-config` with the file and env, as a map of key to its printed line.
func printed(t *testing.T, env map[string]string, args ...string) (map[string]string, string, int) {
	t.Helper()
	stdout, stderr, code := runCLI(t, env, append(args, "--print-config")...)
	lines := map[string]string{}
	for _, l := range strings.Split(stdout, "\n") {
		if k, v, ok := strings.Cut(l, ": "); ok && !strings.HasPrefix(k, "#") {
			lines[k] = v
		}
	}
	return lines, stderr, code
}

func TestConfigFileRefusesWhatIsNoSetting(t *testing.T) {
	for _, c := range []struct{ text, want string }{
		{"slott: orders\n", "line 1: unknown key slott: did you mean slot?"},
		{"pg-url: postgres://h/db\nwindw: 12\n", "line 2: unknown key windw: did you mean window?"},
		{"frobnicate: 1\n", "unknown key frobnicate (`cdc-router config keys` lists them)"},
		{"window: many\n", `line 1: window: "many" is not a whole number`},
		{"confirm-timeout: 30\n", `confirm-timeout: "30" is not a duration`},
		{"failover-slot: maybe\n", `failover-slot: "maybe" is not true or false`},
		{"slot: [a, b]\n", "line 1: slot takes one value here (cdc-router run), not a list of 2"},
		{"slot:\n", "line 1: slot has no value"},
		{"table:\n  name: x\n", "table takes a value or a list, found a map"},
		{"config: [a.properties]\n", "the mapping files are listed under mapping:"},
		{"config-file: other.yaml\n", "unknown key config-file"},
		{"- slot\n", "expected keys and values"},
		{"slot: a\nslot: b\n", "line 2: slot is set again (first on line 1)"},
		{"mapping: a\nconfig: b\n", "line 2"},
		{"slot: 'a\n", "not valid YAML"},
	} {
		path := writeFile(t, "router.yaml", c.text)
		_, stderr, code := runCLI(t, nil, "run", "--config-file", path, "--print-config")
		if code != 2 || !strings.Contains(stderr, c.want) || !strings.Contains(stderr, path) {
			t.Errorf("%q: exit %d, stderr %q; want exit 2 naming the file and %q", c.text, code, stderr, c.want)
		}
	}
}

func TestConfigFilePrecedence(t *testing.T) {
	path := writeFile(t, "router.yaml", "# the orders router\nslot: from_file\npublication: pub_file\nwindow: 64\n"+
		"table: [public.orders_outbox, public.more]\nlanes: 2\n")
	env := map[string]string{"CDC_ROUTER_CONFIG_FILE": path, "CDC_ROUTER_PUBLICATION": "pub_env", "CDC_ROUTER_LANES": "3"}
	got, stderr, code := printed(t, env, "run", "--lanes", "5")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for key, want := range map[string]string{
		"slot":        "from_file # file " + path,
		"publication": "pub_env # CDC_ROUTER_PUBLICATION",
		"lanes":       "5 # command line",
		"window":      "64 # file " + path,
		"table":       "[public.orders_outbox, public.more] # file " + path,
		"schema":      "cdc_router # default",
	} {
		if got[key] != want {
			t.Errorf("%s: %q, want %q", key, got[key], want)
		}
	}
}

// The file holds run's settings; another command takes those it has and leaves the rest, and a file key
// that is no key at all is refused there too.
func TestConfigFileOtherCommandsTakeTheirKeys(t *testing.T) {
	path := writeFile(t, "router.yaml", "slot: orders\nlanes: 2\nmessage-prefix: app.events\n")
	got, stderr, code := printed(t, nil, "status", "--config-file", path)
	if code != 0 || got["slot"] != "orders # file "+path || got["message-prefix"] != "app.events # file "+path {
		t.Errorf("status: exit %d %s, %v", code, stderr, got)
	}
	if _, ok := got["lanes"]; ok {
		t.Errorf("status printed lanes, which it does not take")
	}
	bad := writeFile(t, "router.yaml", "slot: orders\nlanse: 2\n")
	if _, stderr, code := runCLI(t, nil, "status", "--config-file", bad, "--print-config"); code != 2 ||
		!strings.Contains(stderr, "did you mean lanes") {
		t.Errorf("status with a mistyped key: exit %d, %q", code, stderr)
	}
}

// A list of one where a command takes one value (run's mapping list, migrate's one --config) is that value.
func TestConfigFileListOfOneIsOneValue(t *testing.T) {
	path := writeFile(t, "router.yaml", "slot: [orders]\nmapping: [a.properties]\n")
	got, stderr, code := printed(t, nil, "migrate", "--config-file", path)
	if code != 0 || got["slot"] != "orders # file "+path || !strings.HasSuffix(got["mapping"], "a.properties # file "+path) {
		t.Errorf("migrate with lists of one: exit %d %s, %v", code, stderr, got)
	}
	two := writeFile(t, "router.yaml", "mapping: [a.properties, b.properties]\n")
	if _, stderr, code := runCLI(t, nil, "backfill", "--config-file", two, "--print-config"); code != 2 ||
		!strings.Contains(stderr, "mapping takes one value here (cdc-router backfill), not a list of 2") {
		t.Errorf("backfill with two mappings: exit %d, %q", code, stderr)
	}
}

// A multi-table router's file is read by the commands of one table or of a slot, which leave its tables to
// run (they take theirs from the record or --table), and by run, which reads them all.
func TestConfigFileOfSeveralTables(t *testing.T) {
	path := writeFile(t, "router.yaml", "slot: orders\ntable: [public.a, public.b]\n")
	for _, cmd := range [][]string{{"status"}, {"reset"}, {"backfill"}, {"quarantine", "list"}, {"jobs", "list"}} {
		got, stderr, code := printed(t, nil, append(cmd, "--config-file", path)...)
		if code != 0 || strings.Contains(got["table"], "public.a") {
			t.Errorf("%v: exit %d %s; table %q, want its own default", cmd, code, stderr, got["table"])
		}
	}
	if got, stderr, code := printed(t, nil, "run", "--config-file", path); code != 0 || got["table"] != "[public.a, public.b] # file "+path {
		t.Errorf("run: exit %d %s, table %q", code, stderr, got["table"])
	}
	env := map[string]string{"CDC_ROUTER_PG_URL": "postgres://u@127.0.0.1:1/db"}
	if _, stderr, code := runCLI(t, env, "migrate", "--config-file", path); code != 2 || !strings.Contains(stderr, "run it once per table") {
		t.Errorf("migrate of a file of two tables: exit %d %q, want it refused", code, stderr)
	}
}

func TestConfigFileMappingsAreRelativeToIt(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "orders.properties"), []byte("table.field.event.id=id\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "router.yaml")
	if err := os.WriteFile(path, []byte("mapping: orders.properties\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, stderr, code := printed(t, nil, "run", "--config-file", path)
	if want := "[" + filepath.Join(dir, "orders.properties") + "] # file " + path; code != 0 || got["mapping"] != want {
		t.Errorf("exit %d %s: mapping %q, want %q", code, stderr, got["mapping"], want)
	}
}

// --print-config's output is a configuration file that gives the same settings, with the passwords masked.
func TestPrintConfigIsAConfigFileWithPasswordsMasked(t *testing.T) {
	env := map[string]string{"CDC_ROUTER_PG_URL": "postgres://router:s3cret@db:5432/app?sslmode=verify-full",
		"CDC_ROUTER_AMQP_URL": "amqp://pub:hunter2@mq:5672/orders", "CDC_ROUTER_SNAPSHOT_WHERE": "true",
		"CDC_ROUTER_SLOT": "123"}
	stdout, stderr, code := runCLI(t, env, "run", "--print-config", "--log-level", "debug")
	if code != 0 || strings.Contains(stdout, "s3cret") || strings.Contains(stdout, "hunter2") ||
		!strings.Contains(stdout, "router:xxxxx@db") || !strings.Contains(stdout, "pub:xxxxx@mq") {
		t.Fatalf("exit %d %s:\n%s", code, stderr, stdout)
	}
	path := writeFile(t, "printed.yaml", stdout)
	again, stderr, code := printed(t, nil, "run", "--config-file", path)
	if code != 0 {
		t.Fatalf("the printed configuration read back: exit %d %s", code, stderr)
	}
	first, _, _ := printed(t, env, "run", "--log-level", "debug")
	for k, v := range first {
		value, _, _ := strings.Cut(v, " #")
		if got, _, _ := strings.Cut(again[k], " #"); got != value {
			t.Errorf("%s: read back %q, printed %q", k, got, value)
		}
	}
}

func TestMaskPassword(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://u:p@h/db":                      "postgres://u:xxxxx@h/db",
		"postgres://u@h/db?password=p&sslmode=off": "postgres://u@h/db?password=xxxxx&sslmode=off",
		"host=h user=u password='a b' dbname=d":    "host=h user=u password=xxxxx dbname=d",
		"amqp://guest:guest@localhost:5672/":       "amqp://guest:xxxxx@localhost:5672/",
		"postgres://h/db":                          "postgres://h/db",
	} {
		if got := maskPassword(in); got != want {
			t.Errorf("maskPassword(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestUnknownEnvironmentVariables(t *testing.T) {
	run := func(environ ...string) (string, int) {
		var stdout, stderr bytes.Buffer
		code := cliEnviron(context.Background(), []string{"version"}, environ, &stdout, &stderr)
		return stderr.String(), code
	}
	if stderr, code := run("CDC_ROUTER_SLOTT=quarkus"); code != 2 || !strings.Contains(stderr, "did you mean CDC_ROUTER_SLOT?") {
		t.Errorf("a mistyped variable: exit %d, %q; want it refused naming CDC_ROUTER_SLOT", code, stderr)
	}
	if stderr, code := run("CDC_ROUTER_MESAGE_PREFIX=x"); code != 2 || !strings.Contains(stderr, "CDC_ROUTER_MESSAGE_PREFIX") {
		t.Errorf("a mistyped variable: exit %d, %q", code, stderr)
	}
	// Known to some command (inbox's, migrate's, backfill's) is known.
	if stderr, code := run("CDC_ROUTER_CONSUMER=x", "CDC_ROUTER_SHARDS=4", "CDC_ROUTER_WHERE=true", "CDC_ROUTER_CONFIG_FILE=x"); code != 0 || stderr != "" {
		t.Errorf("known variables: exit %d, %q", code, stderr)
	}
	// Kubernetes' service links of a Service named cdc-router, and the project's tools.
	if stderr, code := run("CDC_ROUTER_SERVICE_HOST=10.0.0.1", "CDC_ROUTER_SERVICE_PORT_HTTP=8080", "CDC_ROUTER_PORT=tcp://10.0.0.1:8080",
		"CDC_ROUTER_PORT_8080_TCP_ADDR=10.0.0.1", "CDC_ROUTER_RACE=off", "CDC_ROUTER_TEST_PG_BIN=/x"); code != 0 || stderr != "" {
		t.Errorf("service links and tools: exit %d, %q", code, stderr)
	}
	if stderr, code := run("CDC_ROUTER_DEPLOYED_BY=ops"); code != 0 || !strings.Contains(stderr, "warning: CDC_ROUTER_DEPLOYED_BY is no setting") {
		t.Errorf("an unrelated variable: exit %d, %q; want a warning", code, stderr)
	}
}

func TestConfigKeysListsEveryRunFlag(t *testing.T) {
	stdout, _, code := runCLI(t, nil, "config", "keys", "--markdown")
	for _, k := range runKeys() {
		if !strings.Contains(stdout, "| `"+fileKey(k)+"` | `--"+k+"` |") {
			t.Errorf("config keys lacks %s", k)
		}
	}
	if code != 0 || strings.Contains(stdout, "config-file") {
		t.Errorf("exit %d:\n%s", code, stdout)
	}
}

// The configuration docker-compose.yml hands the router is a file run reads.
func TestComposeRouterConfigIsValid(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var compose struct {
		Configs map[string]struct{ Content string } `yaml:"configs"`
	}
	if err := yaml.Unmarshal(b, &compose); err != nil {
		t.Fatal(err)
	}
	content := compose.Configs["router-config"].Content
	if !strings.Contains(content, "slot:") {
		t.Fatalf("docker-compose.yml has no router-config with settings:\n%s", content)
	}
	path := writeFile(t, "router.yaml", content)
	if _, stderr, code := runCLI(t, nil, "run", "--config-file", path, "--print-config"); code != 0 {
		t.Errorf("docker-compose.yml's router-config: exit %d %s", code, stderr)
	}
}

// Each router's AMQP connection is named after its slot (a shard's slot names the shard), so that several
// routers of one vhost can be told apart in rabbitmqctl list_connections.
func TestConnectionNameCarriesTheSlot(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--slot", "orders"}, "cdc-router orders"},
		{[]string{"--slot", "orders", "--shard", "1/4"}, "cdc-router orders_shard_1_of_4"},
	} {
		s := newSettings("run", func(string) string { return "" }, nil)
		f := addRunFlags(s)
		if err := parse(s, append([]string{"--pg-url", "postgres://u@h/db"}, c.args...)); err != nil {
			t.Fatal(err)
		}
		r, err := f.router(nil)
		if err != nil || r.rcfg.ConnectionName != c.want {
			t.Errorf("%v: connection name %q (%v), want %q", c.args, r.rcfg.ConnectionName, err, c.want)
		}
	}
}
