package doctest

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

var (
	link    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	heading = regexp.MustCompile("^(#{1,6}) +(.+?) *#*$")
)

// anchors are the ids GitHub gives the headings of a Markdown text: lower case, without punctuation other
// than '-' and '_', spaces as '-', a repeated one with -1, -2, … (fenced blocks are not headings).
func anchors(text string) map[string]bool {
	ids, seen := map[string]bool{}, map[string]int{}
	fenced := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
		}
		m := heading.FindStringSubmatch(line)
		if fenced || m == nil {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(m[2]) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteRune('-')
			}
		}
		id := b.String()
		if n := seen[id]; n > 0 {
			ids[fmt.Sprintf("%s-%d", id, n)] = true
		} else {
			ids[id] = true
		}
		seen[id]++
	}
	return ids
}

// TestDocsLinks: every relative link of README.md, docs/ and deploy/'s READMEs names a file or folder that
// exists, and every #anchor a heading of the page it points to.
func TestDocsLinks(t *testing.T) {
	root := moduleRoot(t)
	files := pages(t, root)
	m, _ := filepath.Glob(filepath.Join(root, "deploy", "*", "README.md"))
	for _, f := range m {
		rel, _ := filepath.Rel(root, f)
		files = append(files, rel)
	}
	texts := map[string]string{}
	read := func(rel string) (string, bool) {
		if s, ok := texts[rel]; ok {
			return s, true
		}
		b, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			return "", false
		}
		texts[rel] = string(b)
		return texts[rel], true
	}
	for _, rel := range files {
		text, _ := read(rel)
		fenced := false
		for i, line := range strings.Split(text, "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "```") {
				fenced = !fenced
			}
			if fenced {
				continue
			}
			for _, l := range link.FindAllStringSubmatch(line, -1) {
				target := l[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				path, anchor, _ := strings.Cut(target, "#")
				dest := rel
				if path != "" {
					dest = filepath.Clean(filepath.Join(filepath.Dir(rel), path))
					if _, err := os.Stat(filepath.Join(root, dest)); err != nil {
						t.Errorf("%s:%d: link %s: %s does not exist", rel, i+1, target, dest)
						continue
					}
				}
				if anchor == "" || !strings.HasSuffix(dest, ".md") {
					continue
				}
				if s, ok := read(dest); ok && !anchors(s)[anchor] {
					t.Errorf("%s:%d: link %s: %s has no heading #%s", rel, i+1, target, dest, anchor)
				}
			}
		}
	}
}

// codeLink is a docs page, with an anchor, that a message of the code names.
var codeLink = regexp.MustCompile(`docs/([a-z0-9/_-]+\.md)(#[a-z0-9_-]+)?`)

// movedPages are pages that only say where their sections went: the code names the page and section
// where the thing now lives.
var movedPages = map[string]string{
	"operations.md": "split into docs/howto/, docs/reference.md and docs/guarantee.md (issue 38)",
}

// TestCodeNamesDocsThatExist: every docs/<page>.md#<anchor> that a message or comment of the code (a
// non-test Go file) or a deployment file (deploy/, docker-compose.yml, the Makefile) names exists, page and
// heading, so that moving a section of the docs cannot leave an error message pointing nowhere; and none
// names a page that only lists where its sections went.
func TestCodeNamesDocsThatExist(t *testing.T) {
	root := moduleRoot(t)
	check := func(path string) error {
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		for i, line := range strings.Split(string(b), "\n") {
			for _, m := range codeLink.FindAllStringSubmatch(line, -1) {
				if why, ok := movedPages[m[1]]; ok {
					t.Errorf("%s:%d names docs/%s%s, which was %s: name the page and section where it is now", rel, i+1, m[1], m[2], why)
					continue
				}
				page, err := os.ReadFile(filepath.Join(root, "docs", m[1]))
				if err != nil {
					t.Errorf("%s:%d names docs/%s, which does not exist", rel, i+1, m[1])
					continue
				}
				if m[2] != "" && !anchors(string(page))[m[2][1:]] {
					t.Errorf("%s:%d names docs/%s%s, a heading the page does not have", rel, i+1, m[1], m[2])
				}
				if m[2] == "" {
					if id := sectionInWords(line, m[0], string(page)); id != "" {
						t.Errorf("%s:%d names a section of docs/%s in words: write docs/%s#%s, which this test checks", rel, i+1, m[1], m[1], id)
					}
				}
			}
		}
		return nil
	}
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && strings.HasPrefix(d.Name(), ".") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		return check(path)
	})
	if err != nil {
		t.Fatal(err)
	}
	deploy := []string{filepath.Join(root, "docker-compose.yml"), filepath.Join(root, "Makefile")}
	for _, glob := range []string{"deploy/*/*.yaml", "deploy/*/*.yml", "deploy/*/*.json"} {
		m, _ := filepath.Glob(filepath.Join(root, glob))
		deploy = append(deploy, m...)
	}
	for _, path := range deploy {
		if err := check(path); err != nil {
			t.Fatal(err)
		}
	}
}

// inWords is what follows a page's name when a section of it is named in words: "docs/x.md, Section" or
// "docs/x.md (Section".
var inWords = regexp.MustCompile(`^(?:, | \()([^,;:)]+)`)

// sectionInWords returns the anchor of the heading of page that the text right after name on line names in
// words (the heading's words, any case), or "" when it names none.
func sectionInWords(line, name, page string) string {
	at := strings.Index(line, name)
	m := inWords.FindStringSubmatch(line[at+len(name):])
	if m == nil {
		return ""
	}
	words := strings.ToLower(strings.TrimSpace(m[1]))
	for _, l := range strings.Split(page, "\n") {
		h := heading.FindStringSubmatch(l)
		if h == nil || len(words) < 4 {
			continue
		}
		if title := strings.ToLower(strings.Trim(h[2], "`")); title == words || strings.HasPrefix(title, words+" ") {
			for id := range anchors(l) {
				return id
			}
		}
	}
	return ""
}
