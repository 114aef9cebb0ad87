package cdc

import "fmt"

// Fatal is an error that retrying cannot fix: a refusal to stream or a setup error the operator must fix.
// Its message is one sentence that says why and names what to do. Every stage returns it the same way, so
// that the stream's restart loop (replication.Run) and the commands stop on it wherever it was made.
type Fatal struct{ Msg string }

func (f *Fatal) Error() string { return f.Msg }

// Fatalf is a *Fatal with a formatted message.
func Fatalf(format string, args ...any) error { return &Fatal{Msg: fmt.Sprintf(format, args...)} }
