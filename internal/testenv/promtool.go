package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Promtool returns the path of promtool, fetched by fetch-promtool.sh (from Debian's prometheus package,
// into a cache shared between runs) when it is not cached yet. The test fails, never skips, when promtool
// cannot be obtained.
func Promtool(t testing.TB) string {
	t.Helper()
	script := filepath.Join(ModuleRoot(t), "internal", "testenv", "fetch-promtool.sh")
	out, err := exec.Command(script).Output()
	if err != nil {
		msg := err.Error()
		if ee, ok := err.(*exec.ExitError); ok {
			msg = strings.TrimSpace(string(ee.Stderr))
		}
		t.Fatalf("promtool is needed to check the alert rules and the metrics: %s", msg)
	}
	return strings.TrimSpace(string(out))
}

// ModuleRoot is the folder of the module's go.mod, found upwards from the test's working directory.
func ModuleRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's working directory")
		}
		dir = parent
	}
}
