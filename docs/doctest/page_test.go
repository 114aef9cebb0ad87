package doctest

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// block is one fenced block of a page, or the shell of a hidden `<!-- docs-test: sh` comment.
type block struct {
	page string // path relative to the module root
	line int    // 1-based line of the opening fence
	lang string // sh, sql, go, yaml, …; "sh" for a hidden block
	body string // the text, the fence's indentation removed
	// markers
	skip    string // the reason, when skipped
	db      string
	empty   bool
	file    string
	program string
	hidden  bool
}

func (b block) where() string { return fmt.Sprintf("%s:%d", b.page, b.line) }

var (
	fenceOpen  = regexp.MustCompile("^( *)```([a-z]*)\\s*$")
	fenceClose = regexp.MustCompile("^ *```\\s*$")
	marker     = regexp.MustCompile(`^\s*<!-- docs-test: (skip|db|expect-empty|file|program)\b ?(.*?)\s*-->\s*$`)
	hiddenOpen = regexp.MustCompile(`^\s*<!-- docs-test: (sh|setup)\s*$`)
)

// runnable reports whether the test runs b (or writes or builds it).
func (b block) runnable() bool {
	if b.skip != "" {
		return false
	}
	switch b.lang {
	case "sh", "shell", "bash", "console", "sql":
		return true
	case "go":
		return b.program != ""
	}
	return b.file != ""
}

// parsePage reads the blocks of the page at root/rel in their order, with their markers. A marker that
// no block follows is an error, so a marker cannot silently stop applying.
func parsePage(root, rel string) ([]block, error) {
	text, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		return nil, err
	}
	lines := strings.Split(string(text), "\n")
	var (
		blocks  []block
		pending block
		marked  bool
	)
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if m := marker.FindStringSubmatch(l); m != nil {
			marked = true
			switch m[1] {
			case "skip":
				if m[2] == "" {
					return nil, fmt.Errorf("%s:%d: docs-test: skip needs a reason", rel, i+1)
				}
				pending.skip = m[2]
			case "db":
				pending.db = m[2]
			case "expect-empty":
				pending.empty = true
			case "file":
				pending.file = m[2]
			case "program":
				pending.program = m[2]
			}
			continue
		}
		if hiddenOpen.MatchString(l) {
			start := i + 1
			var body []string
			for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "-->"; i++ {
				body = append(body, lines[i])
			}
			if i == len(lines) {
				return nil, fmt.Errorf("%s:%d: docs-test comment not closed by a line -->", rel, start)
			}
			blocks = append(blocks, block{page: rel, line: start, lang: "sh", body: strings.Join(body, "\n") + "\n", hidden: true})
			continue
		}
		m := fenceOpen.FindStringSubmatch(l)
		if m == nil {
			if marked && strings.TrimSpace(l) != "" {
				return nil, fmt.Errorf("%s:%d: a docs-test marker is not followed by a block", rel, i)
			}
			continue
		}
		indent := m[1]
		b := pending
		b.page, b.line, b.lang = rel, i+1, m[2]
		var body []string
		for i++; i < len(lines) && !fenceClose.MatchString(lines[i]); i++ {
			body = append(body, strings.TrimPrefix(lines[i], indent))
		}
		b.body = strings.Join(body, "\n") + "\n"
		if b.lang == "console" {
			var cmds []string
			for _, c := range body {
				if cmd, ok := strings.CutPrefix(strings.TrimPrefix(c, indent), "$ "); ok {
					cmds = append(cmds, cmd)
				}
			}
			b.body = strings.Join(cmds, "\n") + "\n"
		}
		blocks = append(blocks, b)
		pending, marked = block{}, false
	}
	if marked {
		return nil, fmt.Errorf("%s: a docs-test marker at the end is not followed by a block", rel)
	}
	return blocks, nil
}

// pages are README.md and every Markdown file under docs/, relative to root, in a fixed order.
func pages(t *testing.T, root string) []string {
	t.Helper()
	list := []string{"README.md"}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(path, ".md") {
			rel, _ := filepath.Rel(root, path)
			list = append(list, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return list
}

// moduleRoot is the folder of go.mod, two levels up.
func moduleRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root not found: %v", err)
	}
	return root
}
