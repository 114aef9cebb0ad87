package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"go.yaml.in/yaml/v3"
)

// A configuration file (--config-file, CDC_ROUTER_CONFIG_FILE) is YAML: one key per setting of `run`, each
// key the name of run's flag (pg-url, slot, window, ...) and each list a YAML sequence. Every command reads
// the keys it takes from it and leaves the others, which are run's; a key that is no setting of run is
// refused naming the nearest one, and a value of the wrong kind naming its key, line and the kind it needs.
// Precedence, lowest first: a flag's default, the file, the CDC_ROUTER_* environment, the command line.

// The file's one name that is not its flag's: run's --config names the Debezium-properties mapping files,
// which a configuration file calls mapping.
const mappingKey, mappingFlag = "mapping", "config"

// fileKey is the configuration file's key of a flag.
func fileKey(flagName string) string {
	if flagName == mappingFlag {
		return mappingKey
	}
	return flagName
}

// flagOfKey is the flag a configuration file's key sets.
func flagOfKey(key string) string {
	if key == mappingKey {
		return mappingFlag
	}
	return key
}

// fileEntry is one key of a configuration file, with its value (or values, for a sequence) as text.
type fileEntry struct {
	key    string // the flag it sets (an alias already resolved)
	name   string // the key as written
	values []string
	list   bool // written as a sequence
	line   int
}

// configFile is a configuration file read and checked for its form (a mapping of keys to scalars or
// sequences of scalars); what each key means is checked by settings.
type configFile struct {
	path    string
	entries []fileEntry
}

// readConfigFile reads path. Relative paths inside it (mapping files) are relative to its directory.
func readConfigFile(path string) (*configFile, error) {
	text, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read the configuration file: %w", err)
	}
	f, err := parseConfigFile(path, text)
	if err != nil {
		return nil, err
	}
	dir := filepath.Dir(path)
	for i, e := range f.entries {
		if e.key != mappingFlag {
			continue
		}
		for j, v := range e.values {
			if v != "" && !filepath.IsAbs(v) {
				f.entries[i].values[j] = filepath.Join(dir, v)
			}
		}
	}
	return f, nil
}

// parseConfigFile reads the YAML text of a configuration file into its entries, refusing what is not a
// mapping of keys to scalars or sequences of scalars.
func parseConfigFile(path string, text []byte) (*configFile, error) {
	f := &configFile{path: path}
	var doc yaml.Node
	if err := yaml.Unmarshal(text, &doc); err != nil {
		return nil, fmt.Errorf("configuration file %s is not valid YAML: %s", path, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	if len(doc.Content) == 0 { // an empty file, or only comments
		return f, nil
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("configuration file %s, line %d: expected keys and values (slot: orders), found %s",
			path, root.Line, kindName(root))
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		if k.Kind != yaml.ScalarNode || k.Tag == "!!merge" {
			return nil, fmt.Errorf("configuration file %s, line %d: a key must be a plain name such as slot", path, k.Line)
		}
		if line, dup := seen[flagOfKey(k.Value)]; dup {
			return nil, fmt.Errorf("configuration file %s, line %d: %s is set again (first on line %d): keep one",
				path, k.Line, k.Value, line)
		}
		seen[flagOfKey(k.Value)] = k.Line
		e := fileEntry{name: k.Value, key: flagOfKey(k.Value), line: k.Line}
		switch v.Kind {
		case yaml.ScalarNode:
			if v.Tag == "!!null" {
				return nil, fmt.Errorf("configuration file %s, line %d: %s has no value (remove the key to keep the default)",
					path, v.Line, k.Value)
			}
			e.values = []string{v.Value}
		case yaml.SequenceNode:
			e.list = true
			for _, item := range v.Content {
				if item.Kind != yaml.ScalarNode || item.Tag == "!!null" {
					return nil, fmt.Errorf("configuration file %s, line %d: each item of %s must be one value, found %s",
						path, item.Line, k.Value, kindName(item))
				}
				e.values = append(e.values, item.Value)
			}
		default:
			return nil, fmt.Errorf("configuration file %s, line %d: %s takes a value or a list, found %s",
				path, v.Line, k.Value, kindName(v))
		}
		f.entries = append(f.entries, e)
	}
	return f, nil
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a map"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	}
	if n.Tag == "!!null" {
		return "nothing"
	}
	return "a value"
}

// errUnknownKey is wrapped by the refusal of a key that is no setting.
var errUnknownKey = errors.New("unknown key")

// nearest is the name among known closest to name by edit distance, if it is close enough to be a typo.
func nearest(name string, known []string) (string, bool) {
	best, bestD := "", 1<<30
	for _, k := range known {
		if d := editDistance(strings.ToLower(name), strings.ToLower(k)); d < bestD {
			best, bestD = k, d
		}
	}
	limit := max(2, len(name)/4)
	return best, best != "" && bestD <= limit
}

// editDistance is Levenshtein's distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
