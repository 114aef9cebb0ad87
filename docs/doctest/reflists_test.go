package doctest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cdc-router/cdc-router/internal/testenv"
)

// readReference is docs/reference.md's text.
func readReference(t *testing.T, root string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "docs", "reference.md"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// section is the text of the "## title" section of a Markdown text, up to the next "## " heading.
func section(t *testing.T, text, title string) string {
	t.Helper()
	i := strings.Index(text, "\n## "+title+"\n")
	if i < 0 {
		t.Fatalf("docs/reference.md has no section ## %s", title)
	}
	s := text[i+1:]
	if j := strings.Index(s[1:], "\n## "); j >= 0 {
		s = s[:j+1]
	}
	return s
}

var (
	configKey = regexp.MustCompile(`(?m)^(\S+) \((--[a-z0-9-]+), CDC_ROUTER_[A-Z0-9_]+; default`)
	flagRow   = regexp.MustCompile("(?m)^\\| `(--[a-z0-9-]+)` \\| ([^|]*) \\|")
)

// TestReferenceListsEveryConfigKey: the column "Key in a file" of docs/reference.md's flag table names, for
// every key `cdc-router config keys` prints, that key in its flag's row, and in no other row a key that
// does not exist; a flag that is no key says (none).
func TestReferenceListsEveryConfigKey(t *testing.T) {
	root := moduleRoot(t)
	bin := testenv.Build{Pkg: testenv.RouterPackage}.MustPath(t)
	out, err := exec.Command(bin, "config", "keys").CombinedOutput()
	if err != nil {
		t.Fatalf("cdc-router config keys: %v\n%s", err, out)
	}
	keyOf := map[string]string{} // flag -> key
	for _, m := range configKey.FindAllStringSubmatch(string(out), -1) {
		keyOf[m[2]] = m[1]
	}
	if len(keyOf) < 20 {
		t.Fatalf("read %d keys from `cdc-router config keys`:\n%s", len(keyOf), out)
	}
	rows := map[string]string{} // flag -> its key cell
	for _, m := range flagRow.FindAllStringSubmatch(readReference(t, root), -1) {
		rows[m[1]] = strings.TrimSpace(m[2])
	}
	for flag, key := range keyOf {
		cell, ok := rows[flag]
		switch {
		case !ok:
			t.Errorf("docs/reference.md's flag table has no row for %s, the flag of key %s", flag, key)
		case cell != "`"+key+"`":
			t.Errorf("docs/reference.md's row of %s says key %s, `cdc-router config keys` says `%s`", flag, cell, key)
		}
	}
	for flag, cell := range rows {
		if _, ok := keyOf[flag]; !ok && cell != "(none)" {
			t.Errorf("docs/reference.md's row of %s names the key %s, but %s is no key of a configuration file", flag, cell, flag)
		}
	}
}

// registeredMetrics are the metric names the code registers: a cdc_router_* string literal that is the
// Name of a prometheus Opts literal or the first argument of a call (prometheus.NewDesc, or a package's
// helper around it), in a non-test Go file that imports client_golang's prometheus.
func registeredMetrics(t *testing.T, root string) map[string]string {
	t.Helper()
	names := map[string]string{} // name -> where
	whole := regexp.MustCompile(`^cdc_router_[a-z_]+[a-z]$`)
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (strings.HasPrefix(d.Name(), ".") || slices.Contains([]string{"e2e", "chaos", "bench", "docs", "deploy"}, d.Name())) {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		if !slices.ContainsFunc(f.Imports, func(s *ast.ImportSpec) bool {
			return s.Path.Value == `"github.com/prometheus/client_golang/prometheus"`
		}) {
			return nil
		}
		note := func(e ast.Expr) {
			lit, ok := e.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return
			}
			if v, err := strconv.Unquote(lit.Value); err == nil && whole.MatchString(v) {
				rel, _ := filepath.Rel(root, fset.Position(lit.Pos()).Filename)
				names[v] = rel
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.KeyValueExpr:
				if id, ok := n.Key.(*ast.Ident); ok && id.Name == "Name" {
					note(n.Value)
				}
			case *ast.CallExpr:
				if len(n.Args) > 0 {
					note(n.Args[0])
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return names
}

var metricRow = regexp.MustCompile("(?m)^\\| `(cdc_router_[a-z_]+)(\\{[a-z_,]*\\})?` \\|")

// TestReferenceListsEveryMetric: docs/reference.md's metric tables have a row for every metric the code
// registers (the router's and the inbox runner's), and none for a metric it does not.
func TestReferenceListsEveryMetric(t *testing.T) {
	root := moduleRoot(t)
	code := registeredMetrics(t, root)
	if len(code) < 20 {
		t.Fatalf("found %d metrics in the code: %v", len(code), code)
	}
	documented := map[string]bool{}
	for _, m := range metricRow.FindAllStringSubmatch(section(t, readReference(t, root), "Metrics"), -1) {
		documented[m[1]] = true
		if _, ok := code[m[1]]; !ok {
			t.Errorf("docs/reference.md's metric tables list %s, which the code does not register", m[1])
		}
	}
	for name, where := range code {
		if !documented[name] {
			t.Errorf("docs/reference.md's metric tables have no row for %s (registered in %s)", name, where)
		}
	}
}

// routerHeaders are the header names the router sets or reserves: the values of the Header* constants of
// route/message and decode/mapping, and the names reservedHeader (route/message/limits.go) refuses, with
// the prefix it refuses as one name.
func routerHeaders(t *testing.T, root string) map[string]string {
	t.Helper()
	names := map[string]string{}
	fset := token.NewFileSet()
	for _, dir := range []string{"route/message", "decode/mapping"} {
		files, _ := filepath.Glob(filepath.Join(root, dir, "*.go"))
		for _, path := range files {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			rel, _ := filepath.Rel(root, path)
			ast.Inspect(f, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.ValueSpec:
					for i, id := range n.Names {
						if strings.HasPrefix(id.Name, "Header") && i < len(n.Values) {
							if lit, ok := n.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
								v, _ := strconv.Unquote(lit.Value)
								names[v] = rel + " " + id.Name
							}
						}
					}
				case *ast.FuncDecl:
					if n.Name.Name != "reservedHeader" {
						return true
					}
					ast.Inspect(n.Body, func(m ast.Node) bool {
						if lit, ok := m.(*ast.BasicLit); ok && lit.Kind == token.STRING {
							if v, _ := strconv.Unquote(lit.Value); v != "" && !strings.Contains(v, " ") {
								names[v] = rel + " reservedHeader"
							}
						}
						return true
					})
					return false
				}
				return true
			})
		}
	}
	if len(names) < 15 {
		t.Fatalf("found %d header names in the code: %v", len(names), names)
	}
	return names
}

// TestReferenceListsEveryHeader: every header the router sets (its own, a mapped table's) or reserves (the
// router's origin headers, RabbitMQ's) is named in docs/reference.md's section The message.
func TestReferenceListsEveryHeader(t *testing.T) {
	root := moduleRoot(t)
	msg := section(t, readReference(t, root), "The message")
	for name, where := range routerHeaders(t, root) {
		if !strings.Contains(msg, "`"+name+"`") && !strings.Contains(msg, "`"+name+"*`") {
			t.Errorf("docs/reference.md's section The message does not name the header %s (%s)", name, where)
		}
	}
}

var jsonTag = regexp.MustCompile("json:\"([a-z_]+)")

// TestReferenceListsEveryStatusKey: every key of `cdc-router status --json` (a json tag of a non-test file
// of package admin) is named in docs/reference.md's section status --json, as `key`, `parent.key` or
// `parent[].key`. The e2e tests check the keys a run prints; this one also those that a run leaves null.
func TestReferenceListsEveryStatusKey(t *testing.T) {
	root := moduleRoot(t)
	sec := section(t, readReference(t, root), "status --json")
	files, _ := filepath.Glob(filepath.Join(root, "admin", "*.go"))
	keys := map[string]string{}
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range jsonTag.FindAllStringSubmatch(string(b), -1) {
			keys[m[1]] = filepath.Base(path)
		}
	}
	if len(keys) < 40 {
		t.Fatalf("found %d json keys in admin/: %v", len(keys), keys)
	}
	for k, file := range keys {
		if !regexp.MustCompile("[`.\\]]" + regexp.QuoteMeta(k) + "`").MatchString(sec) {
			t.Errorf("docs/reference.md's section status --json does not name the key %s (admin/%s)", k, file)
		}
	}
}
