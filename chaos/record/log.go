package record

import (
	"bytes"
	"strings"
	"sync"
	"time"

	"github.com/cdc-router/cdc-router/chaos/check"
)

// LogWriter turns a process's output into the History's LogLines, as written by router (-1 for a
// command) and, with a standby, by which of the slot's processes (proc).
type LogWriter struct {
	rec    *Recorder
	router int
	proc   int
	mu     sync.Mutex
	part   []byte
	last   []string // the last lines, for exit notes
}

// NewLogWriter is a LogWriter of router's process proc recording into rec.
func NewLogWriter(rec *Recorder, router, proc int) *LogWriter {
	return &LogWriter{rec: rec, router: router, proc: proc}
}

func (w *LogWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.part = append(w.part, p...)
	for {
		i := bytes.IndexByte(w.part, '\n')
		if i < 0 {
			break
		}
		line := string(w.part[:i])
		w.part = w.part[i+1:]
		l := parseLine(w.router, line)
		l.Proc = w.proc
		w.rec.Log(l)
		w.last = append(w.last, line)
		if len(w.last) > 20 {
			w.last = w.last[1:]
		}
	}
	return len(p), nil
}

// LastError is the last line at level ERROR (or the last line) the process wrote.
func (w *LogWriter) LastError() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := len(w.last) - 1; i >= 0; i-- {
		if strings.Contains(w.last[i], "level=ERROR") {
			return w.last[i]
		}
	}
	if len(w.last) > 0 {
		return w.last[len(w.last)-1]
	}
	return ""
}

// parseLine reads slog's text format: time=… level=… msg=…; a line without them is kept as it is.
func parseLine(router int, s string) check.LogLine {
	l := check.LogLine{At: time.Now(), Router: router, Text: s}
	if strings.HasPrefix(s, "time=") {
		if end := strings.IndexByte(s, ' '); end > 5 {
			if t, err := time.Parse(time.RFC3339Nano, s[5:end]); err == nil {
				l.At = t
			}
		}
	}
	if i := strings.Index(s, " level="); i >= 0 {
		lv := s[i+7:]
		if end := strings.IndexByte(lv, ' '); end >= 0 {
			lv = lv[:end]
		}
		l.Level = lv
	}
	return l
}
