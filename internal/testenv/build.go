package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// RouterPackage is the import path of the router's main package.
const RouterPackage = "github.com/cdc-router/cdc-router/cmd/cdc-router"

// Build names one binary of this module: a main package (an import path), its build tags (comma-separated)
// and whether it is built with the race detector.
type Build struct {
	Pkg  string
	Tags string
	Race bool
}

type built struct {
	once sync.Once
	path string
	err  error
}

var (
	builds   sync.Map // Build -> *built
	buildDir struct {
		once sync.Once
		path string
		err  error
	}
)

// Path builds b once per process, into a folder of its own that RemoveBuilds deletes, and returns the
// binary's path.
func (b Build) Path() (string, error) {
	v, _ := builds.LoadOrStore(b, &built{})
	r := v.(*built)
	r.once.Do(func() {
		buildDir.once.Do(func() { buildDir.path, buildDir.err = os.MkdirTemp("", "cdc-router-bin-") })
		if buildDir.err != nil {
			r.err = buildDir.err
			return
		}
		name := filepath.Base(b.Pkg) + strings.ReplaceAll("_"+b.Tags, ",", "_")
		if b.Race {
			name += "_race"
		}
		r.path = filepath.Join(buildDir.path, name)
		args := []string{"build", "-o", r.path}
		if b.Race {
			args = append(args, "-race")
		}
		if b.Tags != "" {
			args = append(args, "-tags", b.Tags)
		}
		out, err := exec.Command("go", append(args, b.Pkg)...).CombinedOutput()
		if err != nil {
			r.err = fmt.Errorf("go build %s: %v: %s", b.Pkg, err, out)
		}
	})
	return r.path, r.err
}

// MustPath is Path that fails tb on a build error.
func (b Build) MustPath(tb testing.TB) string {
	tb.Helper()
	p, err := b.Path()
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

// RemoveBuilds deletes every binary Path built; a TestMain calls it after m.Run.
func RemoveBuilds() {
	if buildDir.path != "" {
		os.RemoveAll(buildDir.path)
	}
}

// RouterRace reports whether the programs under test (the router, the example consumer) are built with the
// race detector: CDC_ROUTER_RACE=on or off when set, and otherwise whatever the test binary was built with.
// `make test` sets it off for the whole suite, whose routers then run at the speed a user's do, and runs
// the core end-to-end tests once more with it on; `make test-race` runs every router with it.
func RouterRace() bool {
	switch os.Getenv("CDC_ROUTER_RACE") {
	case "on", "1", "true":
		return true
	case "off", "0", "false":
		return false
	}
	return RaceEnabled
}

// Router is the router's binary with build tags, built as RouterRace says.
func Router(tb testing.TB, tags string) string {
	tb.Helper()
	return Build{Pkg: RouterPackage, Tags: tags, Race: RouterRace()}.MustPath(tb)
}
