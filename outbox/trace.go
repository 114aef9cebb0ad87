package outbox

import "context"

// The header names of the W3C Trace Context (https://www.w3.org/TR/trace-context/). The router publishes
// every key of the headers column as an AMQP header of the same name, so they reach consumers unchanged.
const (
	HeaderTraceParent = "traceparent"
	HeaderTraceState  = "tracestate"
)

type traceKey struct{}

type traceContext struct{ parent, state string }

// WithTraceParent returns a context carrying a W3C traceparent (such as
// "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01") and tracestate (may be empty) for Write to put
// in the event's headers. A traceparent that is not well-formed is ignored together with its tracestate,
// as the W3C specification asks; ValidTraceParent tells beforehand. With OpenTelemetry, inject the span
// context into a propagation.MapCarrier with propagation.TraceContext{} and pass its two values.
func WithTraceParent(ctx context.Context, traceparent, tracestate string) context.Context {
	return context.WithValue(ctx, traceKey{}, traceContext{parent: traceparent, state: tracestate})
}

// TraceParent returns the traceparent and tracestate that WithTraceParent put in ctx, or empty strings
// when there is none or the traceparent is not well-formed.
func TraceParent(ctx context.Context) (traceparent, tracestate string) {
	tc, _ := ctx.Value(traceKey{}).(traceContext)
	if !ValidTraceParent(tc.parent) {
		return "", ""
	}
	return tc.parent, tc.state
}

// ValidTraceParent reports whether s is a traceparent as the W3C Trace Context defines it: version-traceid-
// parentid-flags in lower-case hexadecimal (2-32-16-2 digits), a version other than ff, a trace id and a
// parent id that are not all zeros; a version above 00 may carry more fields after a dash.
func ValidTraceParent(s string) bool {
	const n = 55 // len("00-" + 32 + "-" + 16 + "-" + 2)
	if len(s) < n || (len(s) > n && (s[:2] == "00" || s[n] != '-')) || s[:2] == "ff" {
		return false
	}
	if s[2] != '-' || s[35] != '-' || s[52] != '-' {
		return false
	}
	return lowerHex(s[:2]) && lowerHex(s[3:35]) && lowerHex(s[36:52]) && lowerHex(s[53:55]) &&
		s[3:35] != "00000000000000000000000000000000" && s[36:52] != "0000000000000000"
}

func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
