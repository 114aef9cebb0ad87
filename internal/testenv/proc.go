package testenv

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Process is a program under test started by Start: what it writes to stdout and stderr is kept, and Done
// is closed once it exited (ExitAt says when).
type Process struct {
	Cmd    *exec.Cmd
	Done   chan struct{}
	ExitAt time.Time
	mu     sync.Mutex
	out    bytes.Buffer
}

// Start starts cmd with its stdout and stderr kept (unless the caller set them).
func Start(cmd *exec.Cmd) (*Process, error) {
	p := &Process{Cmd: cmd, Done: make(chan struct{})}
	if cmd.Stdout == nil {
		cmd.Stdout = p
	}
	if cmd.Stderr == nil {
		cmd.Stderr = p
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() { cmd.Wait(); p.ExitAt = time.Now(); close(p.Done) }()
	return p, nil
}

func (p *Process) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.Write(b)
}

// Output is what the process wrote so far.
func (p *Process) Output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// Signal sends sig to the process.
func (p *Process) Signal(sig syscall.Signal) { p.Cmd.Process.Signal(sig) }

// Kill kills the process and waits until it exited.
func (p *Process) Kill() {
	p.Cmd.Process.Kill()
	<-p.Done
}

// Wait waits up to timeout for the process to exit; code is its exit code (-1 if a signal killed it).
func (p *Process) Wait(timeout time.Duration) (code int, exited bool) {
	select {
	case <-p.Done:
		return p.Cmd.ProcessState.ExitCode(), true
	case <-time.After(timeout):
		return 0, false
	}
}

// WaitOutput waits up to timeout until the output contains s.
func (p *Process) WaitOutput(s string, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for !strings.Contains(p.Output(), s) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
	return true
}

// RaceReport is the race detector's report in the output, from its first warning on; "" without one.
func (p *Process) RaceReport() string {
	out := p.Output()
	if i := strings.Index(out, "WARNING: DATA RACE"); i >= 0 {
		return out[i:]
	}
	return ""
}

// Tail is the last n lines of s.
func Tail(s string, n int) string {
	parts := strings.Split(s, "\n")
	if len(parts) > n {
		parts = parts[len(parts)-n:]
	}
	return strings.Join(parts, "\n")
}

// clockTick is USER_HZ, the unit of utime and stime in /proc/<pid>/stat (100 on Linux everywhere).
const clockTick = 100

// procStat returns fields of /proc/<pid>/stat after the command name: index 0 is the state (field 3),
// so field n of proc(5) is at n-3.
func procStat(pid int) ([]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, err
	}
	s := string(b)
	return strings.Fields(s[strings.LastIndexByte(s, ')')+2:]), nil
}

func field(f []string, n int) float64 {
	v, _ := strconv.ParseFloat(f[n-3], 64)
	return v
}

// CPUSeconds is the user+system CPU time process pid used so far; 0 if it is gone.
func CPUSeconds(pid int) float64 {
	f, err := procStat(pid)
	if err != nil {
		return 0
	}
	return (field(f, 14) + field(f, 15)) / clockTick
}

// PeakRSS is the process's peak resident set size (VmHWM) in MiB; 0 if it is gone.
func PeakRSS(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "VmHWM:") {
			kb, _ := strconv.ParseFloat(strings.Fields(line)[1], 64)
			return kb / 1024
		}
	}
	return 0
}

// PostmasterPID finds the postmaster listening on port: a process named postgres started with -p port.
func PostmasterPID(port int) (int, error) {
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if filepath.Base(args[0]) != "postgres" {
			continue
		}
		for i := 1; i+1 < len(args); i++ {
			if args[i] == "-p" && args[i+1] == strconv.Itoa(port) {
				return strconv.Atoi(filepath.Base(d))
			}
		}
	}
	return 0, fmt.Errorf("no postgres process with -p %d in /proc", port)
}

// ClusterCPU is the CPU time (user+system, seconds) a PostgreSQL cluster used so far: the postmaster, its
// live children (backends, walsenders, checkpointer, ...) and the children that already exited, whose
// time the kernel added to the postmaster's cutime and cstime when it reaped them.
func ClusterCPU(postmaster int) float64 {
	f, err := procStat(postmaster)
	if err != nil {
		return 0
	}
	total := field(f, 14) + field(f, 15) + field(f, 16) + field(f, 17)
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		pid, _ := strconv.Atoi(filepath.Base(d))
		c, err := procStat(pid)
		if err != nil || int(field(c, 4)) != postmaster {
			continue
		}
		total += field(c, 14) + field(c, 15)
	}
	return total / clockTick
}

// ParentPID is the parent of process pid; 0 if it is gone.
func ParentPID(pid int) int {
	f, err := procStat(pid)
	if err != nil {
		return 0
	}
	return int(field(f, 4))
}
