// Package procs runs the chaos harness's router processes as a supervisor would: it starts each one with
// the arguments and environment the runner gives, records its output (record.LogWriter), restarts a
// process that exits without having been asked to after a second (recording check.KindRouterExit), and
// stops them by signal.
//
// It owns the processes and nothing else: which flags, URLs and faults a process gets is the runner's
// (chaos/), what the history means is the checker's (chaos/check).
//
// Invariants:
//  1. A process keeps its HTTP address across restarts, so the /readyz samples of one process are one
//     series.
//  2. A process the harness stopped (Stop) or that exits while the set closes (StopAll) is not restarted.
package procs

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cdc-router/cdc-router/chaos/check"
	"github.com/cdc-router/cdc-router/chaos/record"
)

// Spec is how process k runs: its command line and environment (beyond the harness's own), and where its
// lines and exits go in the history (its slot, Router, and which of the slot's processes, Proc).
type Spec struct {
	Args, Env    []string
	Router, Proc int
}

// Set is the router processes of one run, by index.
type Set struct {
	t    testing.TB
	bin  string
	rec  *record.Recorder
	spec func(k int, httpAddr string) Spec

	mu      sync.Mutex
	procs   []*proc
	closing bool
}

// proc is one run of a process.
type proc struct {
	spec     Spec
	httpAddr string
	cmd      *exec.Cmd
	out      *record.LogWriter
	done     chan struct{}
	intended bool // the harness stopped it; guarded by Set.mu
}

// New is a set of n processes of the binary bin, none started; spec gives process k's command line for
// the HTTP address it serves on.
func New(t testing.TB, bin string, rec *record.Recorder, n int, spec func(k int, httpAddr string) Spec) *Set {
	return &Set{t: t, bin: bin, rec: rec, spec: spec, procs: make([]*proc, n)}
}

// Len is the number of processes.
func (s *Set) Len() int { return len(s.procs) }

// Start starts process k (again) on httpAddr.
func (s *Set) Start(k int, httpAddr string) { s.start(k, httpAddr, nil) }

// start starts process k; with prev set, only if prev is still process k and nobody stopped it on purpose
// (a supervisor's restart).
func (s *Set) start(k int, httpAddr string, prev *proc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing || prev != nil && (s.procs[k] != prev || prev.intended) {
		return
	}
	spec := s.spec(k, httpAddr)
	p := &proc{spec: spec, httpAddr: httpAddr, out: record.NewLogWriter(s.rec, spec.Router, spec.Proc), done: make(chan struct{})}
	p.cmd = exec.Command(s.bin, spec.Args...)
	p.cmd.Env = append(os.Environ(), spec.Env...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		s.t.Errorf("start router process %d: %v", k, err)
		return
	}
	s.procs[k] = p
	go func() {
		p.cmd.Wait()
		close(p.done)
		s.mu.Lock()
		intended, closing := p.intended, s.closing
		s.mu.Unlock()
		if intended || closing {
			return
		}
		now := time.Now()
		s.rec.Event(check.Event{From: now, To: now, Kind: check.KindRouterExit, Router: spec.Router, Proc: spec.Proc,
			Note: fmt.Sprintf("exit %d: %s", p.cmd.ProcessState.ExitCode(), p.out.LastError())})
		time.Sleep(time.Second)
		s.start(k, httpAddr, p)
	}()
}

// Stop sends sig to process k and waits for its exit, killing it after timeout; it returns the exit code
// (-1 for a signal, -2 when it had to be killed) and the address to start it again on.
func (s *Set) Stop(k int, sig syscall.Signal, timeout time.Duration) (int, string) {
	s.mu.Lock()
	p := s.procs[k]
	p.intended = true
	s.mu.Unlock()
	p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
	case <-time.After(timeout):
		p.cmd.Process.Kill()
		<-p.done
		return -2, p.httpAddr
	}
	return p.cmd.ProcessState.ExitCode(), p.httpAddr
}

// Signal sends sig to process k and nothing more: SIGSTOP and SIGCONT pause and continue it (gen.FaultPause),
// which is no exit, so the supervisor neither records nor restarts anything.
func (s *Set) Signal(k int, sig syscall.Signal) error {
	s.mu.Lock()
	p := s.procs[k]
	s.mu.Unlock()
	return p.cmd.Process.Signal(sig)
}

// Addr is process k's HTTP address.
func (s *Set) Addr(k int) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.procs[k].httpAddr
}

// Targets are the processes to sample (record.SampleReady).
func (s *Set) Targets() []record.Target {
	s.mu.Lock()
	defer s.mu.Unlock()
	ts := make([]record.Target, len(s.procs))
	for k, p := range s.procs {
		ts[k] = record.Target{Addr: p.httpAddr, Router: p.spec.Router, Proc: p.spec.Proc}
	}
	return ts
}

// Ready reports whether process k's /readyz answers 200 now: it holds its slot.
func (s *Set) Ready(k int) bool {
	resp, err := (&http.Client{Timeout: time.Second}).Get("http://" + s.Addr(k) + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// StopAll stops every process with SIGTERM at the end of a run (SIGKILL after 30 s) and restarts none.
func (s *Set) StopAll() {
	s.mu.Lock()
	s.closing = true
	ps := append([]*proc(nil), s.procs...)
	s.mu.Unlock()
	for _, p := range ps {
		p.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range ps {
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			p.cmd.Process.Kill()
			<-p.done
		}
	}
}
