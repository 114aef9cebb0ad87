//go:build pprof

package main

// Profiling hooks for the benchmark (bench/compare -pprof-dir), compiled only with `-tags pprof`, so the
// released binary has none of this. With CDC_ROUTER_PROFILE_DIR set, SIGUSR1 starts a CPU profile and
// writes heap-start.pprof; SIGUSR2 stops it and writes cpu.pprof, heap-end.pprof (compare the two with
// pprof -base for the allocations in between), memstats.txt (mallocs, bytes allocated and GC cycles
// between the two signals), block.pprof and mutex.pprof (where goroutines waited on channels, selects and
// locks between the two signals; network waits are not in them) and, last, done.

import (
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"syscall"
)

func init() {
	dir := os.Getenv("CDC_ROUTER_PROFILE_DIR")
	if dir == "" {
		return
	}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGUSR1, syscall.SIGUSR2)
	go func() {
		var cpu *os.File
		var start runtime.MemStats
		for sig := range sigs {
			switch sig {
			case syscall.SIGUSR1:
				if err := os.MkdirAll(dir, 0o755); err != nil {
					fmt.Fprintln(os.Stderr, "profile:", err)
					continue
				}
				writeHeap(filepath.Join(dir, "heap-start.pprof"))
				runtime.ReadMemStats(&start)
				runtime.SetBlockProfileRate(10_000) // one sample per 10 µs blocked, on average
				runtime.SetMutexProfileFraction(10)
				f, err := os.Create(filepath.Join(dir, "cpu.pprof"))
				if err == nil {
					err = pprof.StartCPUProfile(f)
				}
				if err != nil {
					fmt.Fprintln(os.Stderr, "profile:", err)
					continue
				}
				cpu = f
			case syscall.SIGUSR2:
				if cpu != nil {
					pprof.StopCPUProfile()
					cpu.Close()
					cpu = nil
				}
				var end runtime.MemStats
				runtime.ReadMemStats(&end)
				writeHeap(filepath.Join(dir, "heap-end.pprof"))
				writeProfile("block", filepath.Join(dir, "block.pprof"))
				writeProfile("mutex", filepath.Join(dir, "mutex.pprof"))
				runtime.SetBlockProfileRate(0)
				runtime.SetMutexProfileFraction(0)
				os.WriteFile(filepath.Join(dir, "memstats.txt"), fmt.Appendf(nil, "mallocs %d\nbytes %d\ngc %d\n",
					end.Mallocs-start.Mallocs, end.TotalAlloc-start.TotalAlloc, end.NumGC-start.NumGC), 0o644)
				os.WriteFile(filepath.Join(dir, "done"), nil, 0o644)
			}
		}
	}()
}

func writeHeap(path string) { writeProfile("allocs", path) }

func writeProfile(name, path string) {
	f, err := os.Create(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "profile:", err)
		return
	}
	defer f.Close()
	pprof.Lookup(name).WriteTo(f, 0)
}
