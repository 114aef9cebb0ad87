package mapping

import (
	"strconv"
	"strings"
)

// property is one key=value entry of a Java Properties text, with the line it starts on.
type property struct {
	key, value string
	line       int
}

// parseProperties reads text in java.util.Properties' line format: `key=value`, `key: value` or
// `key value`; lines starting with # or ! (after blanks) are comments; a line ending in an odd number of
// backslashes continues on the next one (its leading blanks dropped); \t, \n, \r, \f and \uXXXX are
// escapes and any other backslash keeps the next character. Entries are in text order; a repeated key
// appears twice (the caller decides).
func parseProperties(text string) []property {
	var out []property
	lines := strings.Split(strings.ReplaceAll(strings.ReplaceAll(text, "\r\n", "\n"), "\r", "\n"), "\n")
	for i := 0; i < len(lines); i++ {
		start := i + 1
		line := strings.TrimLeft(lines[i], " \t\f")
		if line == "" || line[0] == '#' || line[0] == '!' {
			continue
		}
		for continued(line) && i+1 < len(lines) {
			i++
			line = line[:len(line)-1] + strings.TrimLeft(lines[i], " \t\f")
		}
		if continued(line) {
			line = line[:len(line)-1]
		}
		key, value := splitProperty(line)
		out = append(out, property{key: unescape(key), value: unescape(value), line: start})
	}
	return out
}

// continued reports whether line ends in an odd number of backslashes.
func continued(line string) bool {
	n := 0
	for i := len(line) - 1; i >= 0 && line[i] == '\\'; i-- {
		n++
	}
	return n%2 == 1
}

// splitProperty splits a logical line at the first unescaped '=', ':' or blank, then drops the blanks and
// at most one '=' or ':' before the value.
func splitProperty(line string) (key, value string) {
	end := len(line)
	for i := 0; i < len(line); i++ {
		if line[i] == '\\' {
			i++
			continue
		}
		if strings.IndexByte("=: \t\f", line[i]) >= 0 {
			end = i
			break
		}
	}
	rest := strings.TrimLeft(line[end:], " \t\f")
	if rest != "" && (rest[0] == '=' || rest[0] == ':') {
		rest = strings.TrimLeft(rest[1:], " \t\f")
	}
	return line[:end], rest
}

func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		i++
		switch s[i] {
		case 't':
			b.WriteByte('\t')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 'f':
			b.WriteByte('\f')
		case 'u':
			if i+5 <= len(s) {
				if r, err := strconv.ParseUint(s[i+1:i+5], 16, 16); err == nil {
					b.WriteRune(rune(r))
					i += 4
					continue
				}
			}
			b.WriteByte('u')
		default:
			b.WriteByte(s[i])
		}
	}
	return b.String()
}
