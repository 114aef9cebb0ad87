package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

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

// cpuSeconds is the user+system CPU time process pid used so far; 0 if it is gone.
func cpuSeconds(pid int) float64 {
	f, err := procStat(pid)
	if err != nil {
		return 0
	}
	return (field(f, 14) + field(f, 15)) / clockTick
}

// peakRSS is the process's peak resident set size (VmHWM) in MiB; 0 if it is gone.
func peakRSS(pid int) float64 {
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

// postmasterPID finds the postmaster listening on port: a process named postgres started with -p port.
func postmasterPID(port int) (int, error) {
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

// clusterCPU is the CPU time (user+system, seconds) the whole cluster used so far: the postmaster, its
// live children (backends, walsenders, checkpointer, ...) and the children that already exited, whose
// time the kernel added to the postmaster's cutime and cstime when it reaped them.
func clusterCPU(postmaster int) float64 {
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
