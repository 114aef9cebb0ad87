package chaos

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/cdc-router/cdc-router/chaos/check"
)

// proc is one run of a router process. A process that exits without the harness having asked for it is
// recorded (KindRouterExit) and started again after a second, as a supervisor would.
type proc struct {
	idx      int
	httpAddr string
	cmd      *exec.Cmd
	out      *logWriter
	done     chan struct{}
	intended bool // the harness stopped it; guarded by world.mu
}

func (w *world) routerArgs(i int) []string {
	s := w.plan.Setup
	args := []string{"run", "--log-level", "info", "--progress-interval", "5s", "--shutdown-timeout", "20s",
		"--lanes", fmt.Sprint(s.Lanes), "--window", fmt.Sprint(s.Window), "--unroutable-queue-type", s.UnroutableType}
	for _, t := range s.Tables {
		args = append(args, "--table", t)
	}
	if s.Shards > 0 {
		args = append(args, "--shard", fmt.Sprintf("%d/%d", i, s.Shards))
	}
	if s.AggregateWindow > 1 {
		args = append(args, "--aggregate-window", fmt.Sprint(s.AggregateWindow))
	}
	if w.shortRefusals() {
		args = append(args, "--refusal-retry", refusalRetry)
	}
	args = append(args, w.mappingFlags()...)
	if s.Emit {
		args = append(args, "--message-prefix", messagePrefix)
	}
	if d := w.plan.PublicationCheck; d > 0 {
		args = append(args, "--publication-check-interval", d.String())
	}
	return args
}

// startRouter starts router process i (again; standby.go: process i serves slot slotOf(i)) on its fixed HTTP
// address. With prev set, only if prev is still process i and nobody stopped it on purpose (a supervisor's
// restart).
func (w *world) startRouter(i int, httpAddr string, prev *proc) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closing || prev != nil && (w.routers[i] != prev || prev.intended) {
		return
	}
	p := &proc{idx: i, httpAddr: httpAddr, out: &logWriter{rec: w.rec, router: w.slotOf(i), proc: i / w.plan.Setup.Routers()}, done: make(chan struct{})}
	p.cmd = exec.Command(w.bin, append(w.routerArgs(w.slotOf(i)), "--http-addr", httpAddr)...)
	p.cmd.Env = append(os.Environ(), "CDC_ROUTER_PG_URL="+w.pgURLOf(i), "CDC_ROUTER_AMQP_URL="+w.proxiedAMQPURL(),
		"CDC_ROUTER_SLOT="+w.db, "CDC_ROUTER_EXCHANGE="+w.exchange)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		w.t.Errorf("start router %d: %v", i, err)
		return
	}
	w.routers[i] = p
	go func() {
		p.cmd.Wait()
		close(p.done)
		w.mu.Lock()
		intended, closing := p.intended, w.closing
		w.mu.Unlock()
		if intended || closing {
			return
		}
		now := time.Now()
		w.rec.event(check.Event{From: now, To: now, Kind: check.KindRouterExit, Router: w.slotOf(i), Proc: i / w.plan.Setup.Routers(),
			Note: fmt.Sprintf("exit %d: %s", p.cmd.ProcessState.ExitCode(), p.out.lastError())})
		time.Sleep(time.Second)
		w.startRouter(i, httpAddr, p)
	}()
}

// stopRouter sends sig to router i and waits for its exit; it returns the process's exit code (-1 for a
// signal) and the address to start it again on.
func (w *world) stopRouter(i int, sig syscall.Signal, timeout time.Duration) (int, string) {
	w.mu.Lock()
	p := w.routers[i]
	p.intended = true
	w.mu.Unlock()
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

// ready reports whether router i's /readyz answers 200 now: it holds its slot.
func (w *world) ready(i int) bool {
	w.mu.Lock()
	addr := w.routers[i].httpAddr
	w.mu.Unlock()
	resp, err := (&http.Client{Timeout: time.Second}).Get("http://" + addr + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// sampleReady asks every router's /readyz every 500 ms until stop is closed (with a standby, each process's
// /readyz and /readyz?active=1).
func (w *world) sampleReady(stop <-chan struct{}) {
	client := &http.Client{Timeout: time.Second}
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	get := func(url string) int {
		resp, err := client.Get(url)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for round := 0; ; round++ {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		w.mu.Lock()
		addrs := make([]string, len(w.routers))
		for i, p := range w.routers {
			addrs[i] = p.httpAddr
		}
		w.mu.Unlock()
		for i, a := range addrs {
			s := check.Sample{At: time.Now(), Router: w.slotOf(i), Proc: i / w.plan.Setup.Routers(), Code: get("http://" + a + "/readyz"), Round: round}
			if w.plan.Setup.Standby {
				s.Active = get("http://" + a + "/readyz?active=1")
			}
			w.rec.sample(s)
		}
	}
}

// stopAll stops every router gracefully at the end of a run.
func (w *world) stopAll() {
	w.rec.mu.Lock()
	w.rec.h.Stopping = time.Now()
	w.rec.mu.Unlock()
	w.mu.Lock()
	w.closing = true
	ps := append([]*proc(nil), w.routers...)
	w.mu.Unlock()
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
