package record

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/cdc-router/cdc-router/chaos/check"
)

// Target is one router process whose /readyz is sampled: its HTTP address, its slot (Router) and which
// of the slot's processes it is (Proc).
type Target struct {
	Addr         string
	Router, Proc int
}

// SampleReady asks the /readyz of every target every 500 ms until stop is closed, and with standby also
// /readyz?active=1, reading the state in its body and when it arrived. targets is called each round: a restarted process keeps its address.
func SampleReady(rec *Recorder, standby bool, targets func() []Target, stop <-chan struct{}) {
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
	getState := func(url string) (code int, state string) { // the answer and the state in its body
		resp, err := client.Get(url)
		if err != nil {
			return 0, ""
		}
		defer resp.Body.Close()
		var body struct{ State string }
		json.NewDecoder(resp.Body).Decode(&body)
		return resp.StatusCode, body.State
	}
	for round := 0; ; round++ {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		for _, t := range targets() {
			s := check.Sample{At: time.Now(), Router: t.Router, Proc: t.Proc, Code: get("http://" + t.Addr + "/readyz"), Round: round}
			if standby {
				s.Active, s.State = getState("http://" + t.Addr + "/readyz?active=1")
				s.ActiveAt = time.Now()
			}
			rec.Sample(s)
		}
	}
}
