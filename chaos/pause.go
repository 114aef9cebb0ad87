package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"syscall"
	"time"

	"github.com/cdc-router/cdc-router/chaos/check"
	"github.com/cdc-router/cdc-router/chaos/gen"
)

// pauseFault applies a gen.FaultPause: it waits (at most pauseWait) for a process of the step's slot to
// stream and the other to stand by, stops the streaming one by SIGSTOP for f.Dur, with gen.PauseEnded
// terminates its walsender (the slot's active_pid: the session that holds the slot's lock, ADR 0010) a
// second into the pause at most, and continues it by SIGCONT. The event runs from the SIGSTOP to the
// SIGCONT; Event.Proc is the paused process and Event.Gone the SIGSTOP. Its note says whether the other
// process stood by at the pause (check.PauseStandbyReady) and whether the walsender was terminated
// (check.PauseEndedNote), which the checker's pause rules read.
func (w *world) pauseFault(f gen.Step) check.Event {
	k, standby, ok := w.awaitPausable(f.Router, pauseWait)
	if !ok {
		now := time.Now()
		return check.Event{From: now, To: now, Kind: f.Kind, Router: f.Router, Note: "skipped: no process of the slot streamed"}
	}
	note := fmt.Sprintf("proc %d paused", k/w.plan.Setup.Routers())
	if standby {
		note += "; " + check.PauseStandbyReady
	}
	if err := w.routers.Signal(k, syscall.SIGSTOP); err != nil {
		now := time.Now()
		return check.Event{From: now, To: now, Kind: f.Kind, Router: f.Router, Note: "skipped: SIGSTOP: " + err.Error()}
	}
	e := check.Event{From: time.Now(), Kind: f.Kind, Router: f.Router, Proc: k / w.plan.Setup.Routers()}
	e.Gone = e.From
	if f.N == gen.PauseEnded {
		time.Sleep(min(time.Second, f.Dur/2))
		note += "; " + w.endWalsender(f.Router, e.From)
	}
	time.Sleep(time.Until(e.From.Add(f.Dur)))
	if err := w.routers.Signal(k, syscall.SIGCONT); err != nil {
		w.t.Errorf("SIGCONT of router process %d: %v", k, err)
	}
	e.To, e.Note = time.Now(), note
	return e
}

// pauseWait bounds how long a pause waits for its slot to stream (after an earlier fault, a restart).
const pauseWait = 15 * time.Second

// awaitPausable waits up to d for a process of slot i that answers /readyz?active=1 with 200 in state
// streaming (an initial snapshot's copy is outside what ADR 0010's lease bounds), and reports it and
// whether the slot's other process stood by then (its /readyz 200, /readyz?active=1 503).
func (w *world) awaitPausable(i int, d time.Duration) (k int, standby, ok bool) {
	client := &http.Client{Timeout: time.Second}
	state := func(k int, query string) (int, string) {
		resp, err := client.Get("http://" + w.routers.Addr(k) + "/readyz" + query)
		if err != nil {
			return 0, ""
		}
		defer resp.Body.Close()
		var body struct{ State string }
		json.NewDecoder(resp.Body).Decode(&body)
		return resp.StatusCode, body.State
	}
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		for _, k := range w.slotProcs(i) {
			if code, st := state(k, "?active=1"); code != http.StatusOK || st != "streaming" {
				continue
			}
			for _, o := range w.slotProcs(i) {
				if o != k {
					code, _ := state(o, "")
					active, _ := state(o, "?active=1")
					standby = code == http.StatusOK && active != http.StatusOK
				}
			}
			return k, standby, true
		}
	}
	return 0, false, false
}

// endWalsender terminates the walsender of slot i (pg_replication_slots.active_pid), as an operator's
// pg_terminate_backend or a dead host's keepalives would end it, and says what it did for the event's note.
func (w *world) endWalsender(i int, paused time.Time) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := w.connect(ctx)
	defer c.Close(context.Background())
	var pid *int32
	err := c.QueryRow(ctx, `SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1`, w.slot(i)).Scan(&pid)
	switch {
	case err != nil:
		return "walsender not terminated: " + err.Error()
	case pid == nil:
		return "walsender not terminated: the slot had none"
	}
	var done bool
	if err := c.QueryRow(ctx, `SELECT pg_terminate_backend($1)`, *pid).Scan(&done); err != nil || !done {
		return fmt.Sprintf("walsender pid %d not terminated: %v", *pid, err)
	}
	return fmt.Sprintf("%s (pid %d) %.2fs into the pause", check.PauseEndedNote, *pid, time.Since(paused).Seconds())
}
