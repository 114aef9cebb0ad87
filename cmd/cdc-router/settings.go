package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// settings binds flags that each have a CDC_ROUTER_* environment variable and a key in a configuration
// file (configfile.go). Precedence, lowest first: the default, the file, the environment, the command line.
// Only main reads the environment; getenv is passed in. --help shows the built-in defaults, never a value
// from the environment or the file (they may hold a password).
type settings struct {
	fs         *flag.FlagSet
	getenv     func(string) string
	kinds      map[string]string // flag name -> what a value must look like, for the environment's errors
	lists      map[string]bool   // flags that take several values (List, Repeated)
	flagOutput bytes.Buffer      // what the flag package prints: the flag list for --help
	configFile *string           // --config-file
	print      *bool             // --print-config
	sources    map[string]string // flag name -> where its value came from (--print-config, the record)
	file       *configFile       // the configuration file read, if any
	// fileKeys are the keys a configuration file may hold (run's flags): a key this command does not take
	// is left to run, one that is no key at all is refused.
	fileKeys func() []string
	// manyTables is set by run's flags: the command reads several tables. A file's list of several tables
	// is run's, which a command of one table (or of a slot) leaves at its default: it takes its table from
	// the router's record or its own --table.
	manyTables bool
}

func envName(flagName string) string {
	return "CDC_ROUTER_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

func (s *settings) usage(name, text string) string {
	return fmt.Sprintf("%s (env %s)", text, envName(name))
}

func (s *settings) String(name, def, text string) *string {
	return s.fs.String(name, def, s.usage(name, text))
}

func (s *settings) Int(name string, def int, text string) *int {
	s.kinds[name] = "a whole number, e.g. " + strconv.Itoa(def)
	return s.fs.Int(name, def, s.usage(name, text))
}

func (s *settings) Bool(name string, def bool, text string) *bool {
	s.kinds[name] = "true or false"
	return s.fs.Bool(name, def, s.usage(name, text))
}

func (s *settings) Duration(name string, def time.Duration, text string) *time.Duration {
	s.kinds[name] = "a duration such as 30s, 1m30s or 500ms"
	return s.fs.Duration(name, def, s.usage(name, text))
}

// Source values of settings.sources besides an environment variable's name.
const (
	sourceDefault = "default"
	sourceFlag    = "command line"
)

// parse parses args, then applies the environment and then the configuration file to every flag the
// command line did not set.
func (s *settings) parse(args []string) error {
	if err := s.fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w (`%s --help` lists the flags)", err, s.fs.Name())
	}
	if s.fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %s: every setting is a --flag, e.g. --pg-url", redactArg(s.fs.Arg(0)))
	}
	s.fs.Visit(func(f *flag.Flag) { s.sources[f.Name] = sourceFlag })
	var errs []string
	s.fs.VisitAll(func(f *flag.Flag) {
		v := s.getenv(envName(f.Name))
		if s.sources[f.Name] != "" || v == "" {
			return
		}
		if err := s.fs.Set(f.Name, v); err != nil {
			errs = append(errs, fmt.Sprintf("%s=%q is not %s (it sets --%s)", envName(f.Name), v, s.kind(f.Name), f.Name))
			return
		}
		s.sources[f.Name] = envName(f.Name)
	})
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	if err := s.applyFile(); err != nil {
		return err
	}
	s.fs.VisitAll(func(f *flag.Flag) {
		if s.sources[f.Name] == "" {
			s.sources[f.Name] = sourceDefault
		}
	})
	return nil
}

func (s *settings) kind(name string) string {
	if want := s.kinds[name]; want != "" {
		return want
	}
	return "a valid value"
}

// applyFile reads the configuration file that --config-file names and sets each flag of this command that
// neither the command line nor the environment set.
func (s *settings) applyFile() error {
	if s.configFile == nil || *s.configFile == "" {
		return nil
	}
	f, err := readConfigFile(*s.configFile)
	if err != nil {
		return err
	}
	s.file = f
	known := s.fileKeys()
	for _, e := range f.entries {
		at := fmt.Sprintf("configuration file %s, line %d", f.path, e.line)
		if e.name == mappingFlag {
			return fmt.Errorf("%s: the mapping files are listed under %s: in a configuration file (config: is --config's name on the command line)", at, mappingKey)
		}
		if e.key == "config-file" || e.key == "print-config" || !slices.Contains(known, e.key) {
			return unknownKey(at, e.name, known)
		}
		fl := s.fs.Lookup(e.key)
		if fl == nil || s.sources[e.key] != "" { // run's key, or set by the command line or the environment
			continue
		}
		if e.key == "table" && len(e.values) > 1 && !s.manyTables && s.fs.Name() != "cdc-router migrate" {
			continue // migrate keeps them, to refuse them: it must not migrate its default table unasked
		}
		if e.list && !s.lists[e.key] && len(e.values) != 1 { // run's list of one mapping is migrate's one file
			return fmt.Errorf("%s: %s takes one value here (cdc-router %s), not a list of %d", at, e.name,
				strings.TrimPrefix(s.fs.Name(), "cdc-router "), len(e.values))
		}
		for _, v := range e.values {
			if err := s.fs.Set(e.key, v); err != nil {
				return fmt.Errorf("%s: %s: %q is not %s", at, e.name, v, s.kind(e.key))
			}
		}
		s.sources[e.key] = "file " + f.path
	}
	return nil
}

// unknownKey refuses a configuration file's key that is no setting, naming the nearest one.
func unknownKey(at, name string, known []string) error {
	keys := make([]string, 0, len(known))
	for _, k := range known {
		keys = append(keys, fileKey(k))
	}
	if near, ok := nearest(name, keys); ok {
		return fmt.Errorf("%s: %w %s: did you mean %s? (`cdc-router config keys` lists them)", at, errUnknownKey, name, near)
	}
	return fmt.Errorf("%s: %w %s (`cdc-router config keys` lists them)", at, errUnknownKey, name)
}

// redactArg quotes a stray command-line argument for an error message without the password a URL in it may
// hold: a URL's password becomes xxxxx and its query (password=... is allowed there) is left out; a
// key=value connection string is not shown at all.
func redactArg(arg string) string {
	if u, err := url.Parse(arg); err == nil && u.Scheme != "" && u.Host != "" {
		u.RawQuery, u.Fragment = "", ""
		return strconv.Quote(u.Redacted())
	}
	if strings.Contains(arg, "=") || strings.Contains(arg, "@") {
		return "(not shown: it may hold a password)"
	}
	return strconv.Quote(arg)
}

// listValue is a flag whose repetitions add up to one comma-separated list; the first one given replaces
// the default. The environment variable holds the list itself.
type listValue struct {
	value *string
	set   bool
}

func (l *listValue) String() string {
	if l.value == nil {
		return ""
	}
	return *l.value
}

func (l *listValue) Set(v string) error {
	if l.set {
		*l.value += "," + v
		return nil
	}
	*l.value, l.set = v, true
	return nil
}

// List is a string flag that may be repeated, each repetition adding one more comma-separated item.
func (s *settings) List(name, def, text string) *string {
	s.lists[name] = true
	v := def
	s.fs.Var(&listValue{value: &v}, name, s.usage(name, text))
	return &v
}

// repeatedValue is a flag that may be repeated, each occurrence one whole item (commas and all, as a table
// name may hold one); the first one given replaces the default. The environment variable gives one item.
type repeatedValue struct {
	items *[]string
	set   bool
}

func (r *repeatedValue) String() string {
	if r.items == nil {
		return ""
	}
	return strings.Join(*r.items, " ")
}

func (r *repeatedValue) Set(v string) error {
	if !r.set {
		*r.items, r.set = nil, true
	}
	*r.items = append(*r.items, v)
	return nil
}

// Repeated is a string flag that may be repeated, each repetition adding one item; def is the one item when
// none is given (none when def is empty).
func (s *settings) Repeated(name, def, text string) *[]string {
	s.lists[name] = true
	var items []string
	if def != "" {
		items = []string{def}
	}
	s.fs.Var(&repeatedValue{items: &items}, name, s.usage(name, text))
	return &items
}
