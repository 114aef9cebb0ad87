package chaos

import (
	"bytes"
	"strings"
	"sync"
	"time"

	"github.com/cdc-router/cdc-router/chaos/check"
)

// recorder is the History being written by the runner's goroutines.
type recorder struct {
	mu sync.Mutex
	h  check.History
}

func (r *recorder) event(e check.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.h.Events = append(r.h.Events, e)
}

func (r *recorder) delivery(d check.Delivery) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.h.Deliv = append(r.h.Deliv, d)
}

func (r *recorder) sample(s check.Sample) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.h.Ready = append(r.h.Ready, s)
}

func (r *recorder) log(l check.LogLine) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.h.Logs = append(r.h.Logs, l)
}

// delivered is the set of message ids received so far.
func (r *recorder) delivered() map[string]bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := make(map[string]bool, len(r.h.Deliv))
	for _, d := range r.h.Deliv {
		m[d.MessageID] = true
	}
	return m
}

// logWriter turns a process's output into LogLines of router (or -1 for a command).
type logWriter struct {
	rec    *recorder
	router int
	proc   int // with a standby: which of the slot's processes
	mu     sync.Mutex
	part   []byte
	last   []string // the last lines, for exit notes
}

func (w *logWriter) Write(p []byte) (int, error) {
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
		w.rec.log(l)
		w.last = append(w.last, line)
		if len(w.last) > 20 {
			w.last = w.last[1:]
		}
	}
	return len(p), nil
}

// lastError is the last line at level ERROR (or the last line) the process wrote.
func (w *logWriter) lastError() string {
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
