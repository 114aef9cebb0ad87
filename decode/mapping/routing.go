package mapping

import (
	"fmt"
	"regexp"
	"strings"
)

// topicRoute computes a routing key the way Debezium's outbox router and Kafka's RegexRouter compute a
// topic: when the Java regex matches the whole value, its first match is replaced by the replacement with
// the groups substituted; otherwise the value is kept unchanged.
type topicRoute struct {
	re    *regexp.Regexp    // the Java regex, anchored as ^(?:…)$ for Matcher.matches()
	find  *regexp.Regexp    // the regex as given, for the first match Matcher.replaceFirst replaces
	parts []replacementPart // the replacement, parsed once
}

// replacementPart is a literal (group < 0) or a group reference.
type replacementPart struct {
	literal string
	group   int
}

// compileTopicRoute translates route.topic.regex (Java syntax, full-match) to RE2 and parses
// route.topic.replacement (Java's Matcher.replaceFirst syntax: $n, ${name}, \ escapes the next character).
// It refuses what RE2 lacks (lookaround, backreferences, atomic groups, possessive quantifiers, class
// intersections), what Java and RE2 read differently (javaOnly) and group references the regex does not
// define, each with one sentence naming the option and the construct.
func compileTopicRoute(regex, replacement string) (*topicRoute, error) {
	if c := javaOnly(regex); c.differs {
		return nil, fmt.Errorf("route.topic.regex %q uses %s, which Java and Go's RE2 engine read differently: %s", regex, c.name, c.fix)
	} else if c.name != "" {
		return nil, fmt.Errorf("route.topic.regex %q uses %s, which Go's RE2 engine does not support: rewrite the regex without it", regex, c.name)
	}
	re, err := regexp.Compile(`^(?:` + regex + `)$`)
	if err != nil {
		return nil, fmt.Errorf("route.topic.regex %q is not a regex Go's RE2 engine accepts (%v): rewrite it (RE2 has no lookaround or backreferences)", regex, err)
	}
	find := regexp.MustCompile(regex) // compiles: the anchored form did
	parts, err := parseReplacement(replacement, re)
	if err != nil {
		return nil, fmt.Errorf("route.topic.replacement %q: %w", replacement, err)
	}
	return &topicRoute{re: re, find: find, parts: parts}, nil
}

// parseReplacement parses Java replacement syntax against re's groups. Like Java, $ followed by digits
// takes the first digit and then each further digit while the number stays a group of re.
func parseReplacement(s string, re *regexp.Regexp) ([]replacementPart, error) {
	var parts []replacementPart
	var lit strings.Builder
	flush := func() {
		if lit.Len() > 0 {
			parts = append(parts, replacementPart{literal: lit.String(), group: -1})
			lit.Reset()
		}
	}
	groups := re.NumSubexp() // the anchoring (?:…) adds none: these are the user's groups
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\':
			if i+1 == len(s) {
				return nil, fmt.Errorf("ends with a lone backslash: write \\\\ for a literal backslash")
			}
			i++
			lit.WriteByte(s[i])
		case c == '$' && i+1 < len(s) && s[i+1] == '{':
			end := strings.IndexByte(s[i:], '}')
			if end < 0 {
				return nil, fmt.Errorf("has ${ without a closing }")
			}
			name := s[i+2 : i+end]
			idx := re.SubexpIndex(name)
			if idx < 0 {
				return nil, fmt.Errorf("names the group ${%s}, which route.topic.regex does not define: add (?<%s>…) to the regex or fix the name", name, name)
			}
			flush()
			parts = append(parts, replacementPart{group: idx})
			i += end
		case c == '$':
			if i+1 == len(s) || s[i+1] < '0' || s[i+1] > '9' {
				return nil, fmt.Errorf("has a $ not followed by a group number or {name}: write \\$ for a literal dollar")
			}
			n := int(s[i+1] - '0')
			if n > groups {
				return nil, fmt.Errorf("refers to group $%d but route.topic.regex has %d groups: fix the number or add the group", n, groups)
			}
			i++
			for i+1 < len(s) && s[i+1] >= '0' && s[i+1] <= '9' && n*10+int(s[i+1]-'0') <= groups {
				n = n*10 + int(s[i+1]-'0')
				i++
			}
			flush()
			parts = append(parts, replacementPart{group: n})
		default:
			lit.WriteByte(c)
		}
	}
	flush()
	return parts, nil
}

// key is the routing key for a route.by.field value, as Kafka's RegexRouter computes it: when
// matcher.matches() (the whole value), matcher.replaceFirst(replacement), which replaces the first match a
// search finds. That match starts at 0 but may be shorter than the value (a|ab on "ab" replaces "a"); RE2's
// leftmost-first search picks the same one as Java's backtracking.
func (t *topicRoute) key(value string) string {
	m := t.find.FindStringSubmatchIndex(value)
	whole := m != nil && m[0] == 0 && m[1] == len(value) // then matches() holds; otherwise ask the anchored form
	if m == nil || !whole && !t.re.MatchString(value) {
		return value // Debezium keeps the raw value when the regex does not match
	}
	var b strings.Builder
	b.WriteString(value[:m[0]])
	for _, p := range t.parts {
		if p.group < 0 {
			b.WriteString(p.literal)
		} else if m[2*p.group] >= 0 {
			b.WriteString(value[m[2*p.group]:m[2*p.group+1]])
		}
	}
	b.WriteString(value[m[1]:])
	return b.String()
}
