package doctest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// metricName is a Prometheus metric name of the router's in a page or a deployment file.
var metricName = regexp.MustCompile(`\bcdc_router_[a-z_]+[a-z]\b`)

// notMetrics are names of the router's own that look like metrics: PostgreSQL objects and RabbitMQ users.
var notMetrics = regexp.MustCompile(`^cdc_router_(outbox|shard|pub|slot|test|router$)`)

// TestDocsNameOnlyMetricsThatExist checks that every cdc_router_* metric name README.md, docs/ and deploy/
// mention is one the code defines (a string literal of a non-test Go file, or such a histogram's
// _bucket/_sum/_count series).
func TestDocsNameOnlyMetricsThatExist(t *testing.T) {
	root := moduleRoot(t)
	defined := map[string]bool{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "deploy") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				if v, err := strconv.Unquote(lit.Value); err == nil {
					for _, m := range metricName.FindAllString(v, -1) {
						defined[m] = true
					}
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	files := pages(t, root)
	for _, glob := range []string{"deploy/*/*.yaml", "deploy/*/*.yml", "deploy/*/*.json"} {
		m, _ := filepath.Glob(filepath.Join(root, glob))
		for _, f := range m {
			rel, _ := filepath.Rel(root, f)
			files = append(files, rel)
		}
	}
	for _, rel := range files {
		b, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			for _, name := range metricName.FindAllString(line, -1) {
				base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_sum"), "_count")
				if notMetrics.MatchString(name) || defined[name] || defined[base] {
					continue
				}
				t.Errorf("%s:%d names %s, which the code does not define", rel, i+1, name)
			}
		}
	}
}
