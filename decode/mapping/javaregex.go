package mapping

import (
	"regexp"
	"strings"
)

// javaConstruct is a construct of a Java regex that RE2 cannot run (differs false) or that Java and RE2
// read differently, Java refusing what RE2 accepts included (differs true, with the fix).
type javaConstruct struct {
	name, fix string
	differs   bool
}

func unsupported(name string) javaConstruct { return javaConstruct{name: name} }

func differs(name, fix string) javaConstruct {
	return javaConstruct{name: name, fix: fix, differs: true}
}

// javaOnly finds the first construct of a Java regex (route.topic.regex) that Go's RE2 rejects, or that the
// two engines read differently; the zero value when there is none. Each is refused at start-up: a regex
// that routes events otherwise than in Debezium must not load silently. Quoted text (\Q…\E) and escaped
// characters are skipped.
func javaOnly(regex string) javaConstruct {
	inClass, first := false, -1 // first: where a ] would be the class's first character, a literal in both
	for i := 0; i < len(regex); i++ {
		rest := regex[i:]
		switch c := regex[i]; {
		case strings.HasPrefix(rest, `\Q`):
			end := strings.Index(rest, `\E`)
			if end < 0 {
				return javaConstruct{} // quoted to the end, as in Java
			}
			i += end + 1
		case c == '\\' && i+1 < len(regex):
			if found := javaEscape(regex[i+1]); found.name != "" {
				return found
			}
			i++
		case inClass && strings.HasPrefix(rest, "[:"):
			return differs("a POSIX class [[:name:]]", "Java reads a [ inside a class as a nested class (here of the "+
				"characters :name:), RE2 as the POSIX class; write the ranges, e.g. [a-zA-Z]")
		case inClass && c == '[':
			return differs("a nested character class [[…]]", "Java reads a [ inside a class as a nested class or a union, "+
				"RE2 as a literal [; write \\[ for the character, or list the ranges in one class")
		case inClass && c == ']' && i != first:
			inClass = false
		case inClass && strings.HasPrefix(rest, "&&"):
			return unsupported("a character class intersection &&")
		case inClass:
		case c == '[':
			inClass, first = true, i+1
			if strings.HasPrefix(rest, "[^") {
				first, i = i+2, i+1
			}
		case c == '{' && !repetition.MatchString(rest):
			return differs("a { that starts no repetition", "Java refuses it, RE2 reads it as the character; write \\{, "+
				"or a repetition {n}, {n,} or {n,m}")
		case c == '(':
			if found := javaGroup(rest); found.name != "" {
				return found
			}
		default:
			for _, q := range []string{"*+", "++", "?+", "}+"} {
				if strings.HasPrefix(rest, q) {
					return unsupported("a possessive quantifier " + strings.Replace(q, "}", "{n}", 1))
				}
			}
		}
	}
	return javaConstruct{}
}

// repetition is a bounded repetition as Java and RE2 both read it, at the start of the text.
var repetition = regexp.MustCompile(`^\{[0-9]+(,[0-9]*)?\}`)

// javaEscape finds an escape \c that RE2 rejects while Java takes it, or that the two read differently.
func javaEscape(c byte) javaConstruct {
	switch c {
	case '1', '2', '3', '4', '5', '6', '7', '8', '9':
		return unsupported(`a backreference \` + string(c))
	case 'k':
		return unsupported(`a named backreference \k<…>`)
	case 'v':
		return differs(`\v`, `Java reads it as any vertical whitespace, RE2 as the vertical tab alone; write [\n\x0B\f\r] or \x0B`)
	}
	return javaConstruct{}
}

// javaGroup finds a group opening (rest starts at its "(") that RE2 rejects or reads differently.
func javaGroup(rest string) javaConstruct {
	for _, c := range []struct{ token, name string }{
		{"(?=", "a lookahead (?=…)"}, {"(?!", "a negative lookahead (?!…)"}, {"(?<=", "a lookbehind (?<=…)"},
		{"(?<!", "a negative lookbehind (?<!…)"}, {"(?>", "an atomic group (?>…)"},
	} {
		if strings.HasPrefix(rest, c.token) {
			return unsupported(c.name)
		}
	}
	if strings.HasPrefix(rest, "(?P<") {
		return differs("a group (?P<name>…)", "Java refuses this Python syntax, RE2 accepts it; write (?<name>…)")
	}
	if name, ok := strings.CutPrefix(rest, "(?<"); ok {
		name, _, _ = strings.Cut(name, ">")
		if !javaGroupName.MatchString(name) {
			return differs("the group name <"+name+">", "Java takes ASCII letters and digits only, starting with a "+
				"letter, RE2 accepts more; rename the group")
		}
	}
	if flags := inlineFlags.FindString(rest); strings.Contains(flags, "U") {
		return differs("the flag U in "+flags, "Java reads it as Unicode character classes, RE2 as ungreedy quantifiers; remove it")
	}
	return javaConstruct{}
}

var (
	javaGroupName = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9]*$`)
	inlineFlags   = regexp.MustCompile(`^\(\?[a-zA-Z-]*[:)]`)
)
