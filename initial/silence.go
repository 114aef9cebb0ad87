package initial

import (
	"context"

	"github.com/cdc-router/cdc-router/pgserver"
)

// watch bounds the copy's waits on a PostgreSQL that accepts TCP but does not answer (pgserver.Silence,
// every half of PGTimeout): a silent server ends the copy with a pgserver.Retryable, so the run restarts
// (cause postgres) and resumes the copy from its stored progress.
func (c Config) watch(ctx context.Context) (wctx context.Context, end func(err error) error) {
	return c.silence().Watch(ctx)
}

// probe is one of watch's probes.
func (c Config) probe(ctx context.Context) error { return c.silence().Probe(ctx) }

func (c Config) silence() pgserver.Silence {
	return pgserver.Silence{URL: c.PGURL, Timeout: c.PGTimeout, Who: "the initial snapshot",
		Then:    "the router tries again and resumes the copy from its stored progress (the bound is --pg-timeout)",
		Waiting: c.WaitOnPostgres}
}
