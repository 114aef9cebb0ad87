package pgserver

import (
	"errors"
	"strings"
	"testing"

	"github.com/cdc-router/cdc-router/internal/cdc"
	"github.com/jackc/pgx/v5/pgconn"
)

func isFatal(err error) bool {
	var f *cdc.Fatal
	return errors.As(err, &f)
}

func TestSlotOptions(t *testing.T) {
	for _, tc := range []struct {
		export, failover bool
		want             string
	}{
		{false, false, "NOEXPORT_SNAPSHOT"},
		{true, false, "EXPORT_SNAPSHOT"},
		{true, true, "(SNAPSHOT 'export', FAILOVER true)"},
		{false, true, "(SNAPSHOT 'nothing', FAILOVER true)"},
	} {
		if got := slotOptions(tc.export, tc.failover).SnapshotAction; got != tc.want {
			t.Errorf("slotOptions(export %v, failover %v) = %q, want %q", tc.export, tc.failover, got, tc.want)
		}
	}
}

func TestTimelineEnd(t *testing.T) {
	hist := "1\t0/3000158\tno recovery target specified\n\n2\t0/5000000\tno recovery target specified\n"
	for tli, want := range map[int32]string{1: "0/3000158", 2: "0/5000000", 3: "0/0"} {
		if got := timelineEnd(hist, tli).String(); got != want {
			t.Errorf("timelineEnd(%d) = %s, want %s", tli, got, want)
		}
	}
}

// TestRequirePrimary: every router connection accepts only a primary, whatever the URL's form, and a
// target_session_attrs that asks for a standby is refused with one sentence.
func TestRequirePrimary(t *testing.T) {
	for _, url := range []string{
		"postgres://u@a:5432,b:5433/db",
		"postgres://u@a:5432,b:5433/db?target_session_attrs=primary",
		"postgres://u@a/db?target_session_attrs=read-write",
		"host=a,b port=5432,5433 dbname=db user=u target_session_attrs=primary",
	} {
		cfg, err := parseURL(url)
		if err != nil {
			t.Errorf("%s: %v", url, err)
			continue
		}
		if cfg.ValidateConnect == nil {
			t.Errorf("%s: no connection check; want the primary check", url)
		}
		for _, f := range cfg.Fallbacks {
			if f.Host != "a" && f.Host != "b" {
				t.Errorf("%s: fallback host %q", url, f.Host)
			}
		}
	}
	for _, url := range []string{
		"postgres://u@a:5432,b:5433/db?target_session_attrs=standby",
		"postgres://u@a/db?target_session_attrs=prefer-standby",
		"host=a,b dbname=db target_session_attrs=read-only",
	} {
		if _, err := parseURL(url); err == nil || !isFatal(err) || !strings.Contains(err.Error(), "use target_session_attrs=primary") {
			t.Errorf("%s: %v; want a refusal naming target_session_attrs=primary", url, err)
		}
	}
	cfg, _ := parseURL("postgres://u@a:5432,b:5433/db")
	if got := hostOf(cfg); got != "a:5432,b:5433" {
		t.Errorf("hostOf = %q, want a:5432,b:5433", got)
	}
	// A connection that found only standbys is retried (a failover in progress), with a sentence naming the fix.
	err := explainConnect(errors.New("a:5432: connection refused"), "a:5432")
	if errors.Is(err, ErrStandby) {
		t.Fatalf("an unrelated connect error was taken for a standby: %v", err)
	}
	password := &pgconn.PgError{Code: "28P01", Message: "password authentication failed"}
	if err := explainConnect(errors.Join(ErrStandby, password), hostOf(cfg)); !isFatal(err) ||
		!strings.Contains(err.Error(), "refused the password") {
		t.Errorf("a standby and a refused password: %v; want the password refusal, which a failover does not fix", err)
	}
	starting := &pgconn.PgError{Code: "57P03", Message: "the database system is starting up"}
	if err := explainConnect(errors.Join(starting, ErrStandby), hostOf(cfg)); !errors.Is(err, ErrStandby) || isFatal(err) {
		t.Errorf("a server starting up and a standby: %v; want the retryable no-primary error", err)
	}
	err = explainConnect(errors.Join(errors.New("a:5432: refused"), ErrStandby), hostOf(cfg))
	if !errors.Is(err, ErrStandby) || isFatal(err) || !strings.Contains(err.Error(), "no primary PostgreSQL at a:5432,b:5433") {
		t.Errorf("explainConnect(standby) = %v; want a retryable error naming both hosts", err)
	}
}
