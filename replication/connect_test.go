package replication

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/cdc-router/cdc-router/metrics"
	"github.com/cdc-router/cdc-router/pgserver"
)

// silentServer accepts TCP connections and never answers, as a stalled PostgreSQL or a silent partition
// behind a forwarder does; it returns its address.
func silentServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var held []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c) // kept open, never read
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		for _, c := range held {
			c.Close()
		}
	})
	return ln.Addr().String()
}

// TestConnectionAttemptsEndWithinTheBound: every kind of PostgreSQL connection the router makes (ordinary,
// replication, snapshot reader) to a server that accepts TCP but never answers ends within the router's
// bound with a retryable error that names the server and the bound, also when the URL has no
// connect_timeout; a shorter connect_timeout in the URL wins over the bound.
func TestConnectionAttemptsEndWithinTheBound(t *testing.T) {
	addr := silentServer(t)
	url := "postgres://router:secret@" + addr + "/db?sslmode=disable"
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		url     string
		bound   time.Duration
		connect func(ctx context.Context, url string, d time.Duration) error
		within  time.Duration
	}{
		{"ordinary", url, 2 * time.Second, func(ctx context.Context, url string, d time.Duration) error {
			_, err := pgserver.ConnectSQLWithin(ctx, url, d)
			return err
		}, 2 * time.Second},
		{"replication", url, 2 * time.Second, func(ctx context.Context, url string, d time.Duration) error {
			_, _, err := connectReplication(ctx, url, d, 0)
			return err
		}, 2 * time.Second},
		{"reader", url, 2 * time.Second, func(ctx context.Context, url string, d time.Duration) error {
			_, err := pgserver.ConnectReaderWithin(ctx, url, d)
			return err
		}, 2 * time.Second},
		{"connect_timeout shorter than the bound", url + "&connect_timeout=1", time.Minute,
			func(ctx context.Context, url string, d time.Duration) error {
				_, err := pgserver.ConnectSQLWithin(ctx, url, d)
				return err
			}, time.Second},
	} {
		began := time.Now()
		err := tc.connect(ctx, tc.url, tc.bound)
		took := time.Since(began)
		if err == nil {
			t.Fatalf("%s: connected to a server that never answers", tc.name)
		}
		if took < tc.within-100*time.Millisecond || took > tc.within+3*time.Second {
			t.Errorf("%s: the attempt took %v, want about %v", tc.name, took, tc.within)
		}
		if msg := err.Error(); !strings.Contains(msg, addr) || !strings.Contains(msg, "did not complete the connection within "+tc.within.String()) ||
			strings.Contains(msg, "secret") {
			t.Errorf("%s: error %q, want one naming %s and the bound %v (and no password)", tc.name, msg, addr, tc.within)
		}
		if IsFatal(err) || causeOf(err) != metrics.CausePostgres {
			t.Errorf("%s: error %q is fatal %v, cause %s; want retryable, cause postgres", tc.name, err, IsFatal(err), causeOf(err))
		}
	}
}
