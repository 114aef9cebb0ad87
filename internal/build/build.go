// Package build names the router's build, so that what one build recorded (the progress inside a
// transaction, counted under its own rules) is never applied by another.
//
// Invariant, pinned by a test: ID is never empty for a binary built from a module (TestIDNamesTheBuild); it
// is "" only when nothing identifies the build, which callers treat as matching nothing.
package build

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"runtime/debug"
)

// ID names the router's build: its module version and VCS revision, and, when those do not pin the
// code (no revision, or a modified tree), a hash of the executable itself; "" when nothing identifies it.
func ID() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	id, pinned := info.Main.Path+"@"+info.Main.Version, false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			id, pinned = id+" "+s.Value, true
		case "vcs.modified":
			pinned = pinned && s.Value == "false"
		}
	}
	if pinned {
		return id
	}
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	f, err := os.Open(exe)
	if err != nil {
		return ""
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return ""
	}
	return id + " " + hex.EncodeToString(h.Sum(nil))
}
