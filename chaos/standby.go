package chaos

import (
	"fmt"
	"net/http"
	"syscall"
	"time"

	"github.com/cdc-router/cdc-router/chaos/check"
	"github.com/cdc-router/cdc-router/chaos/gen"
	"github.com/cdc-router/cdc-router/chaos/procs"
	"github.com/cdc-router/cdc-router/internal/testenv"
)

// With gen.Setup.Standby the world runs two router processes per slot, same flags, each with a /readyz
// port of its own: process k serves slot k % Routers(), and Sample.Proc is k / Routers(). Each process
// reaches PostgreSQL through a proxy of its own in front of the shared one (pgProxy), so that a fault of
// the shared proxy hits both and FaultPGCutActive the active one alone.

// procs is how many router processes the world runs.
func (w *world) procs() int {
	if w.plan.Setup.Standby {
		return 2 * w.plan.Setup.Routers()
	}
	return w.plan.Setup.Routers()
}

// slotOf is the slot (router index) process k serves.
func (w *world) slotOf(k int) int { return k % w.plan.Setup.Routers() }

// slotProcs are the processes of slot i.
func (w *world) slotProcs(i int) []int {
	ks := []int{i}
	if w.plan.Setup.Standby {
		ks = append(ks, i+w.plan.Setup.Routers())
	}
	return ks
}

// startAll starts every router process, each on an HTTP address of its own.
func (w *world) startAll() {
	w.routers = procs.New(w.t, w.bin, w.rec, w.procs(), w.spec)
	if w.plan.Setup.Standby {
		for range w.procs() {
			w.procPG = append(w.procPG, testenv.NewProxy(w.t, w.pgProxy.Addr))
		}
	}
	for k := range w.procs() {
		w.routers.Start(k, freeAddr())
	}
}

// pgURLOf is the PostgreSQL URL process k runs with.
func (w *world) pgURLOf(k int) string {
	if len(w.procPG) == 0 {
		return w.proxiedPGURL()
	}
	return fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable", w.procPG[k].Addr, w.db)
}

// activeProc is the process of slot i that answers /readyz?active=1 with 200 now; when none does (an
// outage, a takeover under way), the slot's first process, and ok is false.
func (w *world) activeProc(i int) (k int, ok bool) {
	client := &http.Client{Timeout: time.Second}
	for _, k := range w.slotProcs(i) {
		addr := w.routers.Addr(k)
		if resp, err := client.Get("http://" + addr + "/readyz?active=1"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return k, true
			}
		}
	}
	return i, false
}

// takeoverFault applies a router SIGKILL or SIGTERM, or FaultPGCutActive, to the active process of the
// step's slot, so that the standby takes over; a killed or stopped process starts again (and stands by).
// The event says which process was hit and when it was gone (Event.Proc, Event.Gone).
func (w *world) takeoverFault(f gen.Step) check.Event {
	e := check.Event{From: time.Now(), Kind: f.Kind, Router: f.Router}
	k, ok := w.activeProc(f.Router)
	e.Proc = k / w.plan.Setup.Routers()
	note := ""
	if !ok {
		note = fmt.Sprintf("no process was active; proc %d hit", e.Proc)
	}
	switch f.Kind {
	case gen.FaultKill:
		_, addr := w.routers.Stop(k, syscall.SIGKILL, 10*time.Second)
		e.Gone = time.Now()
		time.Sleep(f.Dur)
		w.awaitOther(f.Router, k, e.Gone)
		w.routers.Start(k, addr)
	case gen.FaultTerm:
		code, addr := w.routers.Stop(k, syscall.SIGTERM, 45*time.Second)
		e.Gone = time.Now()
		w.awaitOther(f.Router, k, e.Gone)
		w.routers.Start(k, addr)
		note = fmt.Sprintf("exit %d %s", code, note)
	case gen.FaultPGCutActive:
		w.procPG[k].Cut()
		e.Gone = time.Now()
	}
	e.To, e.Note = time.Now(), note
	return e
}

// awaitOther waits until a process of slot i other than k is active, at most takeoverWait after gone: a
// supervisor restarts the old router only once the standby took over (otherwise the restarted one, which
// tries at once, often wins the slot back before the standby's next attempt, a second apart).
func (w *world) awaitOther(i, k int, gone time.Time) {
	for time.Since(gone) < takeoverWait {
		if a, ok := w.activeProc(i); ok && a != k {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// takeoverWait bounds awaitOther: past the checker's takeover bound, so that a slow takeover is seen.
const takeoverWait = 8 * time.Second
