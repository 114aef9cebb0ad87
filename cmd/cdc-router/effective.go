package main

import (
	"flag"
	"net/url"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// setting is one flag's effective value, as --print-config shows it and a router records it.
type setting struct {
	name   string   // the flag's name
	values []string // one value, or the items of a list; a password masked
	list   bool
	source string // sourceDefault, sourceFlag, an environment variable's name, or "file PATH"
}

// names are the command's flags.
func (s *settings) names() []string {
	var names []string
	s.fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	return names
}

// effective is every setting of the command but --config-file and --print-config, in name order, with
// the passwords in URLs masked.
func (s *settings) effective() []setting {
	var out []setting
	s.fs.VisitAll(func(f *flag.Flag) {
		if f.Name == "config-file" || f.Name == "print-config" {
			return
		}
		st := setting{name: f.Name, list: s.lists[f.Name], source: s.sources[f.Name]}
		switch v := f.Value.(type) {
		case *repeatedValue:
			st.values = slices.Clone(*v.items)
		case *listValue:
			if v.String() != "" {
				st.values = strings.Split(v.String(), ",")
			}
		default:
			st.values = []string{f.Value.String()}
		}
		if strings.HasSuffix(f.Name, "-url") {
			for i, v := range st.values {
				st.values[i] = maskPassword(v)
			}
		}
		out = append(out, st)
	})
	return out
}

// settingsMap is effective as one text per key (a list joined with commas), for the router's record.
func (s *settings) settingsMap() map[string]string {
	m := map[string]string{}
	for _, st := range s.effective() {
		m[fileKey(st.name)] = strings.Join(st.values, ",")
	}
	return m
}

// printConfig is --print-config's output: a configuration file holding the effective settings, each with
// where it came from; the settings a configuration file cannot hold (this command's own) are comments.
func (s *settings) printConfig() string {
	keys := s.fileKeys()
	doc := &yaml.Node{Kind: yaml.MappingNode}
	var own []string
	for _, st := range s.effective() {
		if !slices.Contains(keys, st.name) {
			own = append(own, "--"+st.name+"="+strings.Join(st.values, ","))
			continue
		}
		k := &yaml.Node{Kind: yaml.ScalarNode, Value: fileKey(st.name), LineComment: st.source}
		var v *yaml.Node
		if st.list {
			k.LineComment = ""
			v = &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle, LineComment: st.source}
			for _, item := range st.values {
				v.Content = append(v.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: item})
			}
		} else {
			v = &yaml.Node{Kind: yaml.ScalarNode, Value: st.values[0]}
			if s.kinds[st.name] == "" { // a string: quoted where YAML would read it as another kind
				v.Tag = "!!str"
			}
		}
		doc.Content = append(doc.Content, k, v)
	}
	out, err := yaml.Marshal(doc)
	if err != nil { // a mapping of scalars always marshals
		panic(err)
	}
	head := "# " + s.fs.Name() + ": the effective settings (default < configuration file < CDC_ROUTER_* < command line), passwords masked\n"
	for _, o := range own {
		head += "# not a configuration file key: " + o + "\n"
	}
	return head + strings.TrimRight(string(out), "\n") + "\n"
}

// dsnPassword is a password in a key=value connection string or a URL's query.
var dsnPassword = regexp.MustCompile(`(?i)(password\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&]*)`)

// maskPassword replaces the password of a PostgreSQL or AMQP URL (in its user part or its query) or of a
// key=value connection string with xxxxx.
func maskPassword(v string) string {
	if u, err := url.Parse(v); err == nil && u.Scheme != "" {
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		}
		return dsnPassword.ReplaceAllString(u.String(), "${1}xxxxx")
	}
	return dsnPassword.ReplaceAllString(v, "${1}xxxxx")
}
