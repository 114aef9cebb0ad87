package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// docs/configuration.md's key table is what `config keys --markdown` prints, and each of its YAML blocks
// is a configuration file run reads.
func TestConfigurationDocListsEveryKey(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "configuration.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	start := strings.Index(doc, "|---|")
	end := strings.Index(doc, "<!-- end of generated keys -->")
	if start < 0 || end < start {
		t.Fatal("docs/configuration.md has no generated key table")
	}
	table := doc[strings.LastIndex(doc[:start], "\n| key")+1 : end]
	if want := configKeys(true); table != want {
		t.Errorf("docs/configuration.md's key table differs from `cdc-router config keys --markdown`; "+
			"replace it with that output:\n%s", want)
	}
	blocks := regexp.MustCompile("(?ms)^```yaml\n(.*?)^```").FindAllStringSubmatch(doc, -1)
	if len(blocks) == 0 {
		t.Fatal("docs/configuration.md has no YAML example")
	}
	for _, m := range blocks {
		path := writeFile(t, "example.yaml", m[1])
		if _, stderr, code := runCLI(t, nil, "run", "--config-file", path, "--print-config"); code != 0 {
			t.Errorf("the example\n%s\nis refused: %s", m[1], stderr)
		}
	}
}
