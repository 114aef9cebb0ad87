package replication

import (
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cdc-router/cdc-router/offsets"
)

// TestDecideStartAfterPromotion: a promoted standby has the same system id and a later timeline. With the
// slot there (synchronized), the router goes on from the later of the slot's and the stored position; without
// it, the slot-lost refusal, with a hint that names --failover-slot (or, with it, the standby settings).
func TestDecideStartAfterPromotion(t *testing.T) {
	sys := pglogrepl.IdentifySystemResult{SystemID: "42", Timeline: 2, DBName: "app"}
	stored := offsets.Position{LSN: 90, SystemID: "42", Timeline: 1}
	synced := SlotInfo{Exists: true, Plugin: "pgoutput", Database: "app", ConfirmedFlush: 80, WALStatus: "reserved",
		Failover: true, Synced: true}
	d, err := decideStart(Config{Slot: "s1"}, sys, synced, stored, true)
	if err != nil || d.create || d.start != 90 {
		t.Fatalf("synced slot after a promotion: %+v, %v; want start at the stored 90", d, err)
	}
	for _, tc := range []struct {
		failover bool
		want     string
	}{
		{false, "run the router with --failover-slot"},
		{true, "check sync_replication_slots = on"},
	} {
		_, err := decideStart(Config{Slot: "s1", FailoverSlot: tc.failover}, sys, SlotInfo{}, stored, true)
		if err == nil || !IsFatal(err) || !strings.Contains(err.Error(), "does not exist but a position") ||
			!strings.Contains(err.Error(), "cdc-router reset --slot s1") || !strings.Contains(err.Error(), tc.want) ||
			!strings.Contains(err.Error(), "timeline 2, the position is of timeline 1") {
			t.Errorf("slot missing after a promotion (failover %v): %v; want the slot-lost refusal with %q", tc.failover, err, tc.want)
		}
	}
	same := stored
	same.Timeline = 2
	if _, err := decideStart(Config{Slot: "s1"}, sys, SlotInfo{}, same, true); err == nil ||
		strings.Contains(err.Error(), "promoted") {
		t.Errorf("slot missing on the same timeline: %v; want the refusal without the promotion hint", err)
	}
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
		if _, err := parseURL(url); err == nil || !IsFatal(err) || !strings.Contains(err.Error(), "use target_session_attrs=primary") {
			t.Errorf("%s: %v; want a refusal naming target_session_attrs=primary", url, err)
		}
	}
	cfg, _ := parseURL("postgres://u@a:5432,b:5433/db")
	if got := hostOf(cfg); got != "a:5432,b:5433" {
		t.Errorf("hostOf = %q, want a:5432,b:5433", got)
	}
	// A connection that found only standbys is retried (a failover in progress), with a sentence naming the fix.
	err := explainConnect(errors.New("a:5432: connection refused"), "a:5432")
	if errors.Is(err, errStandby) {
		t.Fatalf("an unrelated connect error was taken for a standby: %v", err)
	}
	password := &pgconn.PgError{Code: "28P01", Message: "password authentication failed"}
	if err := explainConnect(errors.Join(errStandby, password), hostOf(cfg)); !IsFatal(err) ||
		!strings.Contains(err.Error(), "refused the password") {
		t.Errorf("a standby and a refused password: %v; want the password refusal, which a failover does not fix", err)
	}
	starting := &pgconn.PgError{Code: "57P03", Message: "the database system is starting up"}
	if err := explainConnect(errors.Join(starting, errStandby), hostOf(cfg)); !errors.Is(err, errStandby) || IsFatal(err) {
		t.Errorf("a server starting up and a standby: %v; want the retryable no-primary error", err)
	}
	err = explainConnect(errors.Join(errors.New("a:5432: refused"), errStandby), hostOf(cfg))
	if !errors.Is(err, errStandby) || IsFatal(err) || !strings.Contains(err.Error(), "no primary PostgreSQL at a:5432,b:5433") {
		t.Errorf("explainConnect(standby) = %v; want a retryable error naming both hosts", err)
	}
}
