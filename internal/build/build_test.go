package build

import "testing"

// TestIDNamesTheBuild: a test binary, built from the module, has an id, and the same one each time.
func TestIDNamesTheBuild(t *testing.T) {
	if id := ID(); id == "" || ID() != id {
		t.Errorf("ID() = %q: want the same non-empty id each time", id)
	}
}
