package mapping

import (
	"strings"
	"testing"
)

// TestJavaRegexConstructs: a route.topic.regex that Java and RE2 read differently (or that only one of them
// accepts) is refused, naming the construct; the constructs both read alike load.
func TestJavaRegexConstructs(t *testing.T) {
	refused := []struct{ regex, want string }{
		{"[[a-z]", "uses a nested character class [[…]], which Java and Go's RE2 engine read differently: Java reads a [ inside a class"},
		{"[a-c[x-z]]", "a nested character class [[…]]"},
		{"[^[a]]", "a nested character class [[…]]"},
		{"[[:alpha:]]+", "a POSIX class [[:name:]]"},
		{"a{foo}", "a { that starts no repetition"},
		{"a{,3}", "a { that starts no repetition"},
		{"(?U)(.*)x", "the flag U in (?U)"},
		{"(?iU:a+)", "the flag U in (?iU:"},
		{`a\vb`, `uses \v`},
		{"(?P<x>.*)", "a group (?P<name>…)"},
		{"(?<routed_by>.*)", "the group name <routed_by>"},
		{"(?<1x>.*)", "the group name <1x>"},
		{"a{2}+", "a possessive quantifier {n}+"},
		{"[a-z&&[^b]]", "a character class intersection &&, which Go's RE2 engine does not support"},
		{"(?<=a)b", "a lookbehind"},
	}
	for _, tt := range refused {
		_, err := compileTopicRoute(tt.regex, "x")
		if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "route.topic.regex") {
			t.Errorf("%s: %v, want an error with %q", tt.regex, err, tt.want)
		}
	}
	accepted := []struct{ regex, value, want string }{
		{"[]a]+", "]a", "x"},       // a ] first in a class is a literal in both
		{"[^]a]b", "cb", "x"},      // likewise after ^
		{`[a\[]+`, "a[", "x"},      // an escaped [ in a class
		{`\[a\]`, "[a]", "x"},      // escaped brackets outside one
		{`\Q[[a{\E`, "[[a{", "x"},  // quoted text
		{"a{2,3}", "aaa", "x"},     // repetitions
		{"a{2,}b{1}", "aaab", "x"}, //
		{"(?i)order", "ORDER", "x"},
		{"(?<routedByValue>.*)", "v", "x"},
	}
	for _, tt := range accepted {
		r, err := compileTopicRoute(tt.regex, "x")
		if err != nil {
			t.Errorf("%s: %v", tt.regex, err)
			continue
		}
		if got := r.key(tt.value); got != tt.want {
			t.Errorf("%s on %q = %q, want %q", tt.regex, tt.value, got, tt.want)
		}
	}
}
