package pgtext

import (
	"bytes"
	"encoding/json"
	"strconv"
	"time"
)

// IntStatus is how ParseInt ended: IntOK, IntSyntax (not a decimal integer) or IntRange (out of range).
type IntStatus uint8

const (
	IntOK IntStatus = iota
	IntSyntax
	IntRange
)

// ParseInt parses a signed decimal integer of the given bit size, as strconv.ParseInt(s, 10, bits) does,
// without allocating.
func ParseInt(b []byte, bits uint) (int64, IntStatus) {
	neg := false
	if len(b) > 0 && (b[0] == '-' || b[0] == '+') {
		neg = b[0] == '-'
		b = b[1:]
	}
	if len(b) == 0 {
		return 0, IntSyntax
	}
	limit := uint64(1) << (bits - 1) // magnitude of the smallest value
	var n uint64
	over := false
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, IntSyntax
		}
		d := uint64(c - '0')
		if over || n > (limit-d)/10 {
			over = true
			continue
		}
		n = n*10 + d
	}
	if over || !neg && n == limit {
		return 0, IntRange
	}
	if neg {
		return -int64(n), IntOK
	}
	return int64(n), IntOK
}

func IsJSON(b []byte) bool { return json.Valid(b) }

// StartsObject reports whether b, known to be valid JSON, is an object.
func StartsObject(b []byte) bool {
	t := bytes.TrimLeft(b, " \t\r\n")
	return len(t) > 0 && t[0] == '{'
}

// IsJSONObject reports whether b is one valid JSON object.
func IsJSONObject(b []byte) bool {
	t := bytes.TrimLeft(b, " \t\r\n")
	return len(t) > 0 && t[0] == '{' && json.Valid(b)
}

// ParseTimestamptz parses timestamptz text as PostgreSQL prints it with DateStyle=ISO:
// "2024-01-02 03:04:05.123456+00", the fraction optional, the offset ±hh, ±hh:mm or ±hh:mm:ss.
// The result is in UTC.
func ParseTimestamptz(b []byte) (time.Time, bool) {
	if len(b) > len("2006-01-02 15:04:05.999999-07:00:00") { // too long for the layouts: convert nothing
		return time.Time{}, false
	}
	sign := bytes.LastIndexAny(b, "+-")
	if sign < len("2006-01-02 15:04:05") {
		return time.Time{}, false
	}
	var layout string
	switch len(b) - sign {
	case len("-07"):
		layout = "2006-01-02 15:04:05-07"
	case len("-07:00"):
		layout = "2006-01-02 15:04:05-07:00"
	case len("-07:00:00"):
		layout = "2006-01-02 15:04:05-07:00:00"
	default:
		return time.Time{}, false
	}
	t, err := time.Parse(layout, string(b))
	if err != nil {
		return time.Time{}, false
	}
	return t.UTC(), true
}

// Quote quotes a column value for a RowError reason, cut to 64 bytes.
func Quote(b []byte) string {
	const max = 64
	if len(b) > max {
		return strconv.Quote(string(b[:max])) + "…"
	}
	return strconv.Quote(string(b))
}
