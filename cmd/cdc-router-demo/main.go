// Command cdc-router-demo shows cdc-router at work. As a writer (--write) it inserts an order and its outbox
// row in one transaction at a steady pace; as a consumer (--consume) it binds a durable queue to the
// router's exchange and prints one line per event. With --local-postgres it first starts a throwaway
// PostgreSQL cluster with wal_level=logical and removes it on exit. It is a demo: it prints payloads.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"

	"github.com/cdc-router/cdc-router/internal/testenv"
)

func main() {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	os.Exit(cli(sigs, os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

// cli runs the demo and returns the exit code: 0 success (a signal is a normal stop), 1 failure, 2 usage error.
func cli(sigs <-chan os.Signal, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	cfg, err := parseConfig(args, getenv, stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return 0
	case err != nil:
		fmt.Fprintf(stderr, "cdc-router-demo: %v\n", err)
		return 2
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	writing, stopWriting := context.WithCancel(ctx)
	defer stopWriting()
	go func() {
		<-sigs
		stopWriting()
		if !cfg.write || !cfg.consume {
			cancel()
			return
		}
		fmt.Fprintf(stderr, "demo: stop requested: waiting up to %v for the events already written (signal again to quit now)\n", cfg.drain)
		<-sigs
		cancel()
	}()
	if err := run(ctx, writing, cfg, stdout, stderr); err != nil {
		// pgx lists one line per address it tried; the demo reports one line.
		msg := strings.Join(strings.Fields(strings.NewReplacer(":\n", ": ", "\n", "; ").Replace(err.Error())), " ")
		fmt.Fprintf(stderr, "cdc-router-demo: %s\n", msg)
		return 1
	}
	return 0
}

// run starts the local cluster if asked, then the consumer and the writer. The writer begins only once the
// consumer's queue is bound, so that no event of this run goes to the unroutable queue instead. Ending
// writing stops the writer only: the consumer then waits (at most --drain) for what was written.
func run(ctx, writing context.Context, cfg config, stdout, stderr io.Writer) error {
	if cfg.localPostgres {
		p, err := testenv.StartPostgres()
		if err != nil {
			return fmt.Errorf("start local PostgreSQL: %w", err)
		}
		defer p.Close()
		cfg.pgURL = p.URL("postgres")
		fmt.Fprintf(stdout, "pg-url %s\n", cfg.pgURL)
		fmt.Fprintf(stderr, "demo: local PostgreSQL (wal_level=logical) running at %s until this program stops\n", cfg.pgURL)
	}
	if !cfg.write && !cfg.consume {
		<-ctx.Done()
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	writing, stopWriting := context.WithCancel(writing)
	defer stopWriting()
	t := newTally(cfg.write)
	ready := make(chan struct{})
	if !cfg.consume {
		close(ready)
	}
	var wg sync.WaitGroup
	var werr, cerr error
	if cfg.consume {
		wg.Go(func() {
			if cerr = consume(ctx, cfg, t, ready, stdout, stderr); cerr != nil {
				stopWriting()
			}
		})
	}
	if cfg.write {
		wg.Go(func() {
			werr = write(writing, cfg, t, ready, stderr)
			t.finish()
			if werr != nil {
				cancel()
			}
		})
	}
	wg.Wait()
	fmt.Fprintln(stderr, t.summary(cfg))
	return errors.Join(werr, cerr)
}
