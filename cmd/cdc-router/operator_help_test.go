package main

import (
	"regexp"
	"strings"
	"testing"
)

// TestHelpOfEverySubcommand: `--help` of every command and of each subcommand of jobs and quarantine
// prints its usage to stdout with exit 0 and nothing on stderr; each flag line names a type as its argument
// (a back-quoted word in a usage string would become the argument's name: `-shard migrate --shards N`) and
// the CDC_ROUTER_* variable that sets it.
func TestHelpOfEverySubcommand(t *testing.T) {
	var names [][]string
	for _, c := range commands() {
		names = append(names, []string{c.name})
	}
	for _, parent := range []string{"jobs", "quarantine"} {
		stdout, stderr, code := runCLI(t, nil, parent, "--help")
		if code != 0 || stderr != "" || !strings.Contains(stdout, "Subcommands:") {
			t.Errorf("%s --help: exit %d, stderr %q, stdout:\n%s", parent, code, stderr, stdout)
		}
		for _, m := range regexp.MustCompile(`(?m)^  ([a-z]+) `).FindAllStringSubmatch(stdout, -1) {
			names = append(names, []string{parent, m[1]})
		}
	}
	if len(names) < 14 {
		t.Fatalf("found only the commands %v", names)
	}
	flagLine := regexp.MustCompile(`^  -([a-z0-9-]+)(?: (.*))?$`)
	for _, name := range names {
		cmd := strings.Join(name, " ")
		stdout, stderr, code := runCLI(t, nil, append(name, "--help")...)
		if code != 0 || stderr != "" || (!strings.HasPrefix(stdout, "Usage of cdc-router "+cmd+":") &&
			!strings.HasPrefix(stdout, "Usage: cdc-router "+cmd+" <subcommand>")) {
			t.Errorf("%s --help: exit %d, stderr %q, stdout:\n%s", cmd, code, stderr, stdout)
			continue
		}
		lines := strings.Split(stdout, "\n")
		for i, line := range lines {
			m := flagLine.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			switch m[2] {
			case "", "string", "int", "int64", "uint", "float", "duration", "value":
			default:
				t.Errorf("%s --help: flag -%s shows the argument %q (a back-quoted word in its usage string?)", cmd, m[1], m[2])
			}
			env := "(env CDC_ROUTER_" + strings.ToUpper(strings.ReplaceAll(m[1], "-", "_")) + ")"
			if i+1 >= len(lines) || !strings.Contains(lines[i+1], env) {
				t.Errorf("%s --help: flag -%s does not name %s", cmd, m[1], env)
			}
		}
	}
}
