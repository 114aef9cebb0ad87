package mapping

import (
	"strings"
	"testing"
)

func TestTopicRoute(t *testing.T) {
	tests := []struct{ regex, replacement, value, want string }{
		{"(?<routedByValue>.*)", "outbox.event.${routedByValue}", "Order", "outbox.event.Order"},
		{"(.*)", "$1", "", ""},
		{"(a)(b)(c)(d)(e)(f)(g)(h)(i)(j)", "$10-$1", "abcdefghij", "j-a"},
		{"(a)", "$10", "a", "a0"}, // Java: only one group, so $1 then a literal 0
		{`x\.(.*)`, `\$1=$1`, "x.y", "$1=y"},
		{"a|ab", "[$0]", "ab", "[a]b"}, // matches() on the whole value, then replaceFirst: Java gives "[a]b"
		{"a*?", "<$0>", "aa", "<>aa"},  // likewise: the first match of a lazy regex is empty
		{"a|ab", "x", "abc", "abc"},    // no full match: the raw value
		{"a", "b", "ba", "ba"},         // no match: the raw value
		{"(x)?y", "[$1]", "y", "[]"},   // an unmatched group is empty
	}
	for _, tt := range tests {
		r, err := compileTopicRoute(tt.regex, tt.replacement)
		if err != nil {
			t.Errorf("%s / %s: %v", tt.regex, tt.replacement, err)
			continue
		}
		if got := r.key(tt.value); got != tt.want {
			t.Errorf("%s / %s on %q = %q, want %q", tt.regex, tt.replacement, tt.value, got, tt.want)
		}
	}
}

func TestParseProperties(t *testing.T) {
	text := "# comment\n  ! also\na=1\nb : 2\nc 3\nd=x\\\n   y\ne=\\u0041\\tB\\=\nf\n"
	var got []string
	for _, p := range parseProperties(text) {
		got = append(got, p.key+"|"+p.value)
	}
	want := "a|1 b|2 c|3 d|xy e|A\tB= f|"
	if strings.Join(got, " ") != want {
		t.Errorf("got %q, want %q", strings.Join(got, " "), want)
	}
}
