package doctest

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/cdc-router/cdc-router/internal/testenv"
)

var (
	helpFlag = regexp.MustCompile(`(?m)^  -([a-z0-9-]+)`)
	refFlag  = regexp.MustCompile("(?m)^\\| `--([a-z0-9-]+)`")
)

// TestReferenceListsEveryFlag: docs/reference.md's table of flags names every flag of `cdc-router run` and
// of `backfill` (read from their --help), and no flag that no command has.
func TestReferenceListsEveryFlag(t *testing.T) {
	root := moduleRoot(t)
	bin := testenv.Build{Pkg: testenv.RouterPackage}.MustPath(t)
	help := func(cmd ...string) []string {
		out, _ := exec.Command(bin, append(cmd, "--help")...).CombinedOutput() // --help exits non-zero
		var flags []string
		for _, m := range helpFlag.FindAllStringSubmatch(string(out), -1) {
			flags = append(flags, m[1])
		}
		if len(flags) == 0 {
			t.Fatalf("no flags in `cdc-router %s --help`:\n%s", strings.Join(cmd, " "), out)
		}
		return flags
	}
	any := map[string]bool{}
	for _, cmd := range [][]string{{"migrate"}, {"run"}, {"status"}, {"backfill"}, {"reset"}, {"jobs", "list"}, {"jobs", "remove"},
		{"quarantine", "list"}, {"quarantine", "replay"}, {"quarantine", "purge"}, {"inbox", "list"}, {"inbox", "retry"}} {
		for _, f := range help(cmd...) {
			any[f] = true
		}
	}
	b, err := os.ReadFile(filepath.Join(root, "docs", "reference.md"))
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, m := range refFlag.FindAllStringSubmatch(string(b), -1) {
		documented[m[1]] = true
		if !any[m[1]] {
			t.Errorf("docs/reference.md documents --%s, which no command has", m[1])
		}
	}
	for _, cmd := range []string{"run", "backfill"} {
		for _, f := range help(cmd) {
			if !documented[f] && !strings.HasPrefix(f, "test.") {
				t.Errorf("docs/reference.md's table has no row for --%s of cdc-router %s", f, cmd)
			}
		}
	}
}
