package doctest

import (
	"os"
	"testing"

	"github.com/cdc-router/cdc-router/internal/testenv"
)

// TestMain removes the binaries the tests built (the router, the docs' programs' are in t.TempDir).
func TestMain(m *testing.M) {
	code := m.Run()
	testenv.RemoveBuilds()
	os.Exit(code)
}
