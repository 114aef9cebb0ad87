package main

import (
	"flag"
	"fmt"
	"strings"
	"time"
)

// settings binds flags that each have a CDC_ROUTER_* environment variable: a flag given on the command
// line wins, then the environment, then the default. Only main reads the environment; getenv is passed in.
// --help shows the built-in defaults, never a value from the environment (it may hold a password).
type settings struct {
	fs     *flag.FlagSet
	getenv func(string) string
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
	return s.fs.Int(name, def, s.usage(name, text))
}

func (s *settings) Bool(name string, def bool, text string) *bool {
	return s.fs.Bool(name, def, s.usage(name, text))
}

func (s *settings) Duration(name string, def time.Duration, text string) *time.Duration {
	return s.fs.Duration(name, def, s.usage(name, text))
}

// parse parses args, then applies the environment to every flag the command line did not set.
func (s *settings) parse(args []string) error {
	if err := s.fs.Parse(args); err != nil {
		return err
	}
	if s.fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q: every setting is a --flag", s.fs.Arg(0))
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
			errs = append(errs, fmt.Sprintf("%s: %v", envName(f.Name), err))
		}
	})
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}
