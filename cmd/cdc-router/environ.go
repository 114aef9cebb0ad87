package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
)

// cliEnviron is cli with the process's environment (os.Environ), which it first checks: a CDC_ROUTER_*
// variable that is no setting of any command is refused when it is near one (a typo such as
// CDC_ROUTER_SLOTT, which would otherwise leave the setting at its default without a word), and warned
// about otherwise. Kubernetes' service links of a Service named cdc-router (CDC_ROUTER_SERVICE_HOST,
// CDC_ROUTER_PORT_8080_TCP, ...) and the project's own tooling variables are left alone.
func cliEnviron(ctx context.Context, args, environ []string, stdout, stderr io.Writer) int {
	vars := map[string]string{}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			vars[k] = v
		}
	}
	env := func(k string) string { return vars[k] }
	warnings, err := checkEnviron(ctx, vars)
	if err != nil {
		fmt.Fprintf(stderr, "cdc-router: %v\n", err)
		return 2
	}
	for _, w := range warnings {
		fmt.Fprintf(stderr, "cdc-router: warning: %s\n", w)
	}
	return cli(ctx, args, env, stdout, stderr)
}

// checkEnviron refuses the CDC_ROUTER_* variables of vars that look like a mistyped setting and returns a
// warning for each other one that is no setting.
func checkEnviron(ctx context.Context, vars map[string]string) (warnings []string, err error) {
	var unknown []string
	for k := range vars {
		if strings.HasPrefix(k, "CDC_ROUTER_") && !ignoredEnv(k) {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) == 0 {
		return nil, nil
	}
	known := knownEnv(ctx)
	rests := make([]string, len(known))
	for i, k := range known {
		rests[i] = strings.TrimPrefix(k, "CDC_ROUTER_")
	}
	slices.Sort(unknown)
	var typos []string
	for _, k := range unknown {
		if slices.Contains(known, k) {
			continue
		}
		if near, ok := nearest(strings.TrimPrefix(k, "CDC_ROUTER_"), rests); ok {
			typos = append(typos, fmt.Sprintf("%s is not a setting: did you mean CDC_ROUTER_%s?", k, near))
			continue
		}
		warnings = append(warnings, k+" is no setting of any command; it is ignored")
	}
	if len(typos) > 0 {
		return nil, errors.New(strings.Join(typos, "; ") + " (`cdc-router <command> --help` lists each command's variables)")
	}
	return warnings, nil
}

// ignoredEnv are the CDC_ROUTER_* variables that are not the router's settings: Kubernetes' service links
// (SERVICE_HOST, SERVICE_PORT*, PORT, PORT_<n>_<proto>*) and the project's test, benchmark and build tools.
func ignoredEnv(name string) bool {
	rest := strings.TrimPrefix(name, "CDC_ROUTER_")
	for _, p := range []string{"SERVICE_HOST", "SERVICE_PORT", "PORT", "TEST_", "BENCH_"} {
		if rest == p || strings.HasPrefix(rest, p+"_") || (strings.HasSuffix(p, "_") && strings.HasPrefix(rest, p)) {
			return true
		}
	}
	return slices.Contains([]string{"RACE", "CACHE", "PROFILE_DIR", "DEBIAN_MIRROR"}, rest)
}

// knownEnv are the variables of every command's flags, read from each command's --help.
func knownEnv(ctx context.Context) []string {
	var names []string
	add := func(args ...string) {
		var help helpRequest
		for _, c := range commands() {
			if c.name == args[0] && errors.As(c.run(ctx, append(args[1:], "--help"), func(string) string { return "" }, io.Discard, io.Discard), &help) {
				for _, f := range help.flags {
					names = append(names, envName(f))
				}
			}
		}
	}
	for _, c := range commands() {
		if len(c.subs) == 0 {
			add(c.name)
		}
		for _, sub := range c.subs {
			add(c.name, sub)
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}
