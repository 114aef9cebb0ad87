package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// settings binds flags that each have a CDC_ROUTER_* environment variable: a flag given on the command
// line wins, then the environment, then the default. Only main reads the environment; getenv is passed in.
// --help shows the built-in defaults, never a value from the environment (it may hold a password).
type settings struct {
	fs         *flag.FlagSet
	getenv     func(string) string
	kinds      map[string]string // flag name -> what a value must look like, for the environment's errors
	flagOutput bytes.Buffer      // what the flag package prints: the flag list for --help
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

// parse parses args, then applies the environment to every flag the command line did not set.
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
	given := map[string]bool{}
	s.fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var errs []string
	s.fs.VisitAll(func(f *flag.Flag) {
		v := s.getenv(envName(f.Name))
		if given[f.Name] || v == "" {
			return
		}
		if err := s.fs.Set(f.Name, v); err != nil {
			want := s.kinds[f.Name]
			if want == "" {
				want = "a valid value"
			}
			errs = append(errs, fmt.Sprintf("%s=%q is not %s (it sets --%s)", envName(f.Name), v, want, f.Name))
		}
	})
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
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
	var items []string
	if def != "" {
		items = []string{def}
	}
	s.fs.Var(&repeatedValue{items: &items}, name, s.usage(name, text))
	return &items
}
