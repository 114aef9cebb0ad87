package quarantine

import (
	"encoding/hex"
	"sort"
	"strconv"
	"unicode/utf8"

	"github.com/cdc-router/cdc-router/internal/cdc"
)

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string that jsonb accepts in every server encoding: valid UTF-8 is kept
// as it is (U+2028 and U+2029 included, which encoding/json would escape), each byte of an invalid
// sequence and each NUL becomes U+FFFD, and the only \u escapes are for control characters U+0001..U+001F.
// (jsonb refuses \u0000 everywhere, and \u escapes above U+007F in a SQL_ASCII database.) It reports
// whether anything was replaced.
func appendString(dst []byte, s []byte) ([]byte, bool) {
	replaced := false
	dst = append(dst, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRune(s[i:])
			if r == utf8.RuneError && size == 1 {
				dst, replaced = append(dst, "\uFFFD"...), true
			} else {
				dst = append(dst, s[i:i+size]...)
			}
			i += size
			continue
		}
		switch {
		case c == '"' || c == '\\':
			dst = append(dst, '\\', c)
		case c == '\n':
			dst = append(dst, '\\', 'n')
		case c == '\r':
			dst = append(dst, '\\', 'r')
		case c == '\t':
			dst = append(dst, '\\', 't')
		case c == 0:
			dst, replaced = append(dst, "\uFFFD"...), true
		case c < 0x20:
			dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
		default:
			dst = append(dst, c)
		}
		i++
	}
	return append(dst, '"'), replaced
}

// cutPrefix bounds v's text to cdc.MaxStoredValue bytes and, when the value was cut, drops the incomplete
// UTF-8 sequence the cut may have left at the end, so that a cut alone never reads as invalid UTF-8.
func cutPrefix(v cdc.RawValue) (text []byte, truncated bool) {
	text = v.Text
	if len(text) > cdc.MaxStoredValue {
		text = text[:cdc.MaxStoredValue]
	}
	truncated = int64(len(text)) < v.Size || len(text) < len(v.Text)
	if !truncated {
		return text, false
	}
	for n := 1; n < utf8.UTFMax && n <= len(text); n++ {
		c := text[len(text)-n]
		if c < utf8.RuneSelf {
			break
		}
		if utf8.RuneStart(c) {
			if !utf8.FullRune(text[len(text)-n:]) {
				text = text[:len(text)-n]
			}
			break
		}
	}
	return text, true
}

// encodeValues renders the columns as the row_values object ({"name": "text" or null}) and the
// value_notes object for the values that were cut or were not valid UTF-8; notes is nil when there are none.
func encodeValues(cols map[string]cdc.RawValue) (values string, notes *string) {
	names := make([]string, 0, len(cols))
	for name := range cols {
		names = append(names, name)
	}
	sort.Strings(names)
	v, n := []byte{'{'}, []byte{'{'}
	for _, name := range names {
		col := cols[name]
		if len(v) > 1 {
			v = append(v, ',')
		}
		v, _ = appendString(v, []byte(name))
		v = append(v, ':')
		if col.Null {
			v = append(v, "null"...)
			continue
		}
		text, truncated := cutPrefix(col)
		var invalid bool
		v, invalid = appendString(v, text)
		if !truncated && !invalid {
			continue
		}
		if len(n) > 1 {
			n = append(n, ',')
		}
		n, _ = appendString(n, []byte(name))
		n = append(n, `:{"bytes":`...)
		n = strconv.AppendInt(n, max(col.Size, int64(len(col.Text))), 10)
		n = append(n, `,"sha256":"`...)
		n = hex.AppendEncode(n, col.SHA256[:])
		n = append(n, `","truncated":`...)
		n = strconv.AppendBool(n, truncated)
		n = append(n, `,"invalid_utf8":`...)
		n = strconv.AppendBool(n, invalid)
		n = append(n, '}')
	}
	values = string(append(v, '}'))
	if len(n) == 1 {
		return values, nil
	}
	s := string(append(n, '}'))
	return values, &s
}
