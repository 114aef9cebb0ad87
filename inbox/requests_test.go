package inbox_test

import (
	_ "embed" // testdata/schema_v2.sql
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cdc-router/cdc-router/inbox"
)

// schemaV2 is the inbox schema before request expiry, cancellation and skipped versions, as released.
//
//go:embed testdata/schema_v2.sql
var schemaV2 string

// admin is the Admin of the lab's default consumer.
func (l *lab) admin() *inbox.Admin {
	l.T.Helper()
	a, err := inbox.NewAdmin(l.Ctx, l.DB, inbox.Config{Consumer: "orders-projection"})
	if err != nil {
		l.T.Fatal(err)
	}
	return a
}

// Requests lists every request with who filed it and where it stands; a Runner takes neither an expired
// nor a cancelled request; Cancel withdraws a waiting one and refuses one that was carried out, naming
// its outcome.
func TestRequestsExpireAndCancel(t *testing.T) {
	l := newLab(t)
	p := l.Processor(inbox.Config{})
	e3, e7 := order("42", 3, 30), order("43", 7, 70)
	for _, ev := range []inbox.Event{order("42", 1, 1), e3, e7} {
		l.processOK(p, ev)
	}
	a := l.admin()
	file := func(r inbox.Request) int64 {
		t.Helper()
		id, err := a.Request(l.Ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	expired := file(inbox.Request{Action: "resolve", Kind: "parked", Target: e7.ID, FiledBy: "alice",
		ExpireAfter: time.Millisecond})
	given := file(inbox.Request{Action: "resolve", Kind: "parked", Target: e7.ID, ExpireAfter: time.Hour})
	if ok, err := a.Expire(l.Ctx, given); !ok || err != nil {
		t.Fatalf("Expire(%d) = %v, %v", given, ok, err)
	}
	cancelled := file(inbox.Request{Action: "resolve", Kind: "parked", Target: e7.ID})
	if was, err := a.Cancel(l.Ctx, cancelled, "bob"); was != inbox.RequestWaiting || err != nil {
		t.Fatalf("Cancel(%d) = %q, %v", cancelled, was, err)
	}
	if was, err := a.Cancel(l.Ctx, cancelled, "bob"); was != inbox.RequestCancelled || err != nil {
		t.Fatalf("Cancel(%d) again = %q, %v", cancelled, was, err)
	}
	waiting := file(inbox.Request{Action: "retry", Kind: "parked", Target: e3.ID})
	time.Sleep(5 * time.Millisecond)

	if served, err := p.ServeRequest(l.Ctx); !served || err != nil {
		t.Fatalf("ServeRequest = %v, %v", served, err)
	}
	if served, err := p.ServeRequest(l.Ctx); served || err != nil {
		t.Fatalf("ServeRequest with only expired and cancelled ones left = %v, %v; want none taken", served, err)
	}
	want(t, "e7 still parked", l.Count(`SELECT count(*) FROM inbox.parked WHERE event_id = $1`, e7.ID), 1)

	list, err := a.Requests(l.Ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	states := map[int64]inbox.FiledRequest{}
	for _, r := range list {
		states[r.ID] = r
	}
	want(t, "requests listed", len(list), 4)
	want(t, "newest first", list[0].ID, waiting)
	want(t, "expired", states[expired].State, inbox.RequestExpired)
	want(t, "given up", states[given].State, inbox.RequestExpired)
	want(t, "cancelled", states[cancelled].State, inbox.RequestCancelled)
	want(t, "done", states[waiting].State, inbox.RequestDone)
	want(t, "outcome", states[waiting].Outcome, "parked") // its gap is still open
	if !strings.HasPrefix(states[expired].FiledBy, "alice (role ") || !strings.HasPrefix(states[cancelled].CancelledBy, "bob (role ") {
		t.Errorf("filed by %q, cancelled by %q", states[expired].FiledBy, states[cancelled].CancelledBy)
	}
	if states[given].ExpiresAt.IsZero() || !states[cancelled].ExpiresAt.IsZero() {
		t.Errorf("expires at %v and %v", states[given].ExpiresAt, states[cancelled].ExpiresAt)
	}

	_, err = a.Cancel(l.Ctx, waiting, "")
	if !errors.Is(err, inbox.ErrRequestNotWaiting) || !strings.Contains(err.Error(), "outcome parked") {
		t.Errorf("Cancel of a done request = %v; want ErrRequestNotWaiting naming its outcome", err)
	}
	if _, err := a.Cancel(l.Ctx, 999, ""); !errors.Is(err, inbox.ErrRequestNotFound) {
		t.Errorf("Cancel of an unknown request = %v", err)
	}
	if was, err := a.Cancel(l.Ctx, expired, ""); was != inbox.RequestExpired || err != nil {
		t.Errorf("Cancel of an expired request = %q, %v", was, err)
	}
}

// A resolve whose parked event was applied meanwhile is refused, saying so, and changes nothing.
func TestResolveRequestOfAnEventNoLongerParked(t *testing.T) {
	l := newLab(t)
	p := l.Processor(inbox.Config{})
	v3 := order("42", 3, 300)
	l.processOK(p, order("42", 1, 1))
	l.processOK(p, v3)
	a := l.admin()
	id, err := a.Request(l.Ctx, inbox.Request{Action: "resolve", Kind: "parked", Target: v3.ID})
	if err != nil {
		t.Fatal(err)
	}
	l.processOK(p, order("42", 2, 20))
	if served, err := p.ServeRequest(l.Ctx); !served || err != nil {
		t.Fatalf("ServeRequest = %v, %v", served, err)
	}
	st, err := a.State(l.Ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	want(t, "outcome", st.Outcome, inbox.OutcomeRefused)
	if !strings.Contains(st.Error, "no longer parked (it was applied: the missing versions arrived); nothing skipped") {
		t.Errorf("refusal %q", st.Error)
	}
	want(t, "amount", l.Amount("42"), 321)
}

// The inbox of the previous release (requests without expiry, no skipped table) is upgraded in place,
// twice without change, and a request it held stays waiting.
func TestMigrateAddsRequestExpiryAndSkippedVersions(t *testing.T) {
	l := newBareLab(t)
	old := strings.NewReplacer("{schema_literal}", "'inbox'", "{schema}", "inbox").Replace(schemaV2)
	if _, err := l.DB.Exec(l.Ctx, old); err != nil {
		t.Fatalf("previous schema: %v", err)
	}
	if _, err := l.DB.Exec(l.Ctx, `INSERT INTO inbox.requests (consumer, action, kind, target)
		VALUES ('orders-projection', 'retry', 'failed', '1')`); err != nil {
		t.Fatal(err)
	}
	_, err := inbox.New(l.DB, l.Handle, inbox.Config{Consumer: "orders-projection"}, nil)
	if !errors.Is(err, inbox.ErrNotMigrated) {
		t.Fatalf("New on the previous schema = %v, want ErrNotMigrated", err)
	}
	for range 2 {
		if err := inbox.Migrate(l.Ctx, l.DB); err != nil {
			t.Fatalf("upgrade: %v", err)
		}
	}
	want(t, "new request columns", l.Count(`SELECT count(*) FROM information_schema.columns WHERE table_schema = 'inbox'
		AND table_name = 'requests' AND column_name IN ('filed_by', 'expires_at', 'cancelled_at', 'cancelled_by', 'premise_applied')`), 5)
	want(t, "skipped table", l.Count(`SELECT count(*) FROM information_schema.tables WHERE table_schema = 'inbox'
		AND table_name = 'skipped'`), 1)
	var def string
	if err := l.DB.QueryRow(l.Ctx, `SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = 'failed_reason_check'`).Scan(&def); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(def, "'skipped'") {
		t.Errorf("failed_reason_check = %s", def)
	}
	list, err := l.admin().Requests(l.Ctx, 10)
	if err != nil || len(list) != 1 || list[0].State != inbox.RequestWaiting {
		t.Errorf("requests after the upgrade = %+v, %v; want the old one waiting", list, err)
	}
}
