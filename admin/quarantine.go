package admin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/decode"
	"github.com/cdc-router/cdc-router/internal/cdc"
	"github.com/cdc-router/cdc-router/quarantine"
	"github.com/cdc-router/cdc-router/snapshot"
)

// ErrHandled marks a record that `quarantine replay` leaves alone because it was handled before (no --force).
var ErrHandled = errors.New("already handled")

// ErrStillRefused marks a record whose message RabbitMQ refused again (a nack, a return) through
// Replay.RefusalRetry: the record stays open and the replay goes on with the next one.
var ErrStillRefused = errors.New("still refused by RabbitMQ")

// QuarantineList writes recs as `quarantine list` shows them: one line each, newest first as given, with the
// reason on one line of at most 120 characters.
func QuarantineList(w io.Writer, recs []quarantine.Record) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tQUARANTINED AT\tSLOT\tEVENT ID\tHANDLED\tREASON")
	for _, r := range recs {
		handled := "no"
		if r.Handled() {
			handled = r.HandledHow + " " + r.HandledAt.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", r.ID, r.QuarantinedAt.UTC().Format(time.RFC3339), r.Slot,
			OrDash(r.EventID), handled, OneLine(r.Reason, 120))
	}
	return tw.Flush()
}

// QuarantineRecord renders one record as `quarantine show` does, one fact per line, the values and notes as
// stored (JSON).
func QuarantineRecord(r quarantine.Record) string {
	handled := "no"
	if r.Handled() {
		handled = r.HandledHow + " at " + r.HandledAt.UTC().Format(time.RFC3339)
	}
	commit := "-"
	if r.CommitLSN != 0 {
		commit = r.CommitLSN.String()
	}
	if !r.CommitTime.IsZero() {
		commit += ", committed at " + r.CommitTime.UTC().Format(time.RFC3339Nano)
	}
	values, notes := "NULL (a minimal record: PostgreSQL refused the values, see notes)", "none (every value is whole)"
	if r.Values != nil {
		values = string(r.Values)
	}
	if r.Notes != nil {
		notes = string(r.Notes)
	}
	return fmt.Sprintf("id:             %d\nquarantined at: %s\nslot:           %s\nlsn:            %s\ncommit lsn:     %s\n"+
		"row key:        %s\ntable:          %s\nevent id:       %s\nhandled:        %s\nreason:         %s\n"+
		"values:         %s\nvalue notes:    %s\n", r.ID, r.QuarantinedAt.UTC().Format(time.RFC3339Nano), r.Slot, r.LSN,
		commit, OrDash(r.RowKey), r.Table, OrDash(r.EventID), handled, r.Reason, values, notes)
}

// ReplayPublisher is the broker side of a replay: route.Router satisfies it.
type ReplayPublisher interface {
	quarantine.Publisher
	Close() error
}

// Replay is `cdc-router quarantine replay`: each record's event published again and, after its positive
// confirm, the record marked handled.
type Replay struct {
	Records  *quarantine.Records
	Read     *pgx.Conn // reads the rows still in the outbox tables
	Schema   string
	Table    string                           // the outbox table of a record that names none (--table)
	Decode   func(table string) decode.Config // the row rules of table
	Mappings map[string]*decode.Mapping       // the mapped tables' mappings (--config), by table
	Force    bool                             // replay a record handled before once more
	Timeout  time.Duration                    // how long to wait for each confirm
	// RefusalRetry is how long a message RabbitMQ refuses in a way its state may end (a full queue's nack,
	// a return) is tried again, on a new connection and with backoff, before its record is left open
	// (--refusal-retry; 0: cdc.DefaultRefusalRetry).
	RefusalRetry time.Duration
	// Dial connects the publisher, at the first record that can be replayed; Destination names the exchange
	// and routing key of an event, for the line that reports it.
	Dial        func(ctx context.Context) (ReplayPublisher, error)
	Destination func(cdc.Event) (exchange, routingKey string)
}

// Run replays the records ids in order. A record that cannot be replayed (ErrNotReplayable, ErrHandled) is
// reported on stderr and the others go on; any other error ends the run.
func (r Replay) Run(ctx context.Context, ids []int64, stdout, stderr io.Writer) error {
	var pub ReplayPublisher
	defer func() {
		if pub != nil {
			pub.Close()
		}
	}()
	var failed []string
	for _, id := range ids {
		rec, ev, source, err := r.replayable(ctx, id)
		if err == nil {
			err = r.publish(ctx, &pub, ev, id, stderr)
		}
		if err == nil {
			_, err = r.Records.MarkHandled(ctx, id, quarantine.HandledReplayed)
		}
		if err != nil {
			if !errors.Is(err, quarantine.ErrNotReplayable) && !errors.Is(err, ErrHandled) && !errors.Is(err, ErrStillRefused) {
				return err
			}
			fmt.Fprintf(stderr, "cdc-router quarantine replay: %v\n", err)
			failed = append(failed, strconv.FormatInt(id, 10))
			continue
		}
		exchange, key := r.Destination(ev)
		fmt.Fprintf(stdout, "record %d replayed from %s: event %s published to %s (routing key %s)\n", rec.ID,
			source, ev.ID, exchange, key)
	}
	if len(failed) > 0 {
		return fmt.Errorf("%d of %d records not replayed (%s): see above", len(failed), len(ids), strings.Join(failed, ", "))
	}
	return nil
}

// publish publishes ev, the event of record id, on *pub (dialled when nil) and waits for its confirm. A
// refusal of that one message fails the publisher, so *pub is closed and dialled again for the next try; a
// refusal the broker's state may end (cdc.BrokerState: a full queue's nack, a return) is tried again with
// backoff until RefusalRetry has passed since the first, each try reported on stderr; after that, or for a
// refusal of the message itself, the error wraps ErrStillRefused.
func (r Replay) publish(ctx context.Context, pub *ReplayPublisher, ev cdc.Event, id int64, stderr io.Writer) error {
	period := r.RefusalRetry
	if period <= 0 {
		period = cdc.DefaultRefusalRetry
	}
	var first time.Time
	wait := 250 * time.Millisecond
	for tries := 1; ; tries++ {
		if *pub == nil {
			p, err := r.Dial(ctx)
			if err != nil {
				return err
			}
			*pub = p
		}
		err := quarantine.PublishConfirmed(ctx, *pub, ev, id, r.Timeout)
		if err == nil || !cdc.PerMessage(err) {
			return err
		}
		(*pub).Close()
		*pub = nil
		if first.IsZero() {
			first = time.Now()
		}
		if !cdc.BrokerState(err) || time.Since(first) >= period {
			return fmt.Errorf("record %d %w after %d tries over %s (--refusal-retry %s): %v; it stays open: "+
				"fix the cause and replay it again", id, ErrStillRefused, tries, time.Since(first).Round(time.Second), period, err)
		}
		wait = min(wait, period-time.Since(first)) // the last try at the end of the period
		fmt.Fprintf(stderr, "cdc-router quarantine replay: record %d refused by RabbitMQ (%v); trying again in %s, "+
			"until %s after the first refusal (--refusal-retry)\n", id, err, wait.Round(time.Millisecond), period)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, 5*time.Second)
	}
}

// replayable loads record id and builds its event, from the row in the record's own table (r.Table only for
// a record that names none) when it is still there: a record of a table that r.Mappings maps (by the
// record's table) through that mapping, one whose stored values are of another shape refused without it.
func (r Replay) replayable(ctx context.Context, id int64) (quarantine.Record, cdc.Event, string, error) {
	rec, ok, err := r.Records.Load(ctx, id)
	if err != nil {
		return rec, cdc.Event{}, "", err
	}
	if !ok {
		return rec, cdc.Event{}, "", fmt.Errorf("record %d %w: there is no such record in %s.quarantine", id,
			quarantine.ErrNotReplayable, r.Schema)
	}
	if rec.Handled() && !r.Force {
		return rec, cdc.Event{}, "", fmt.Errorf("record %d was %s at %s (%w): pass --force to replay it once more", id,
			rec.HandledHow, rec.HandledAt.UTC().Format(time.RFC3339), ErrHandled)
	}
	table := decode.QualifiedTable(rec.Table)
	if rec.Table == "" {
		table = decode.QualifiedTable(r.Table)
	}
	if m := r.Mappings[table]; m != nil {
		cfg := snapshot.Config{Table: table, Decode: r.Decode(table)}
		cfg.Decode.Mapping = m
		mapper, row, _, err := snapshot.ReadMappedRow(ctx, r.Read, cfg, rec.EventID)
		if err != nil {
			return rec, cdc.Event{}, "", err
		}
		ev, source, err := quarantine.ReplayMapped(mapper, rec, row)
		return rec, ev, source, err
	}
	if quarantine.MappedShape(rec) {
		return rec, cdc.Event{}, "", fmt.Errorf("record %d %w: it is a row of %s, whose columns are not the native "+
			"outbox's: pass the --config file that run reads %s with (quarantine replay --config FILE)", id,
			quarantine.ErrNotReplayable, table, table)
	}
	var row map[string]*string
	if cdc.IsUUID(rec.EventID) && !strings.HasPrefix(rec.Table, decode.MessageTable) { // a message has no row to read
		if row, _, err = snapshot.ReadRow(ctx, r.Read, table, rec.EventID); err != nil {
			return rec, cdc.Event{}, "", err
		}
	}
	ev, source, err := quarantine.ReplayEvent(r.Decode(table), rec, row)
	return rec, ev, source, err
}

// QuarantineDiscard marks each record of ids handled without publishing it, as `quarantine discard` does:
// a record handled before stays unchanged, and the records that do not exist are named in the error.
func QuarantineDiscard(ctx context.Context, records *quarantine.Records, schema string, ids []int64, stdout, stderr io.Writer) error {
	var missing []string
	for _, id := range ids {
		changed, err := records.MarkHandled(ctx, id, quarantine.HandledDiscarded)
		if err != nil {
			return err
		}
		if changed {
			fmt.Fprintf(stdout, "record %d discarded (marked handled; the record stays)\n", id)
			continue
		}
		rec, ok, err := records.Load(ctx, id)
		switch {
		case err != nil:
			return err
		case !ok:
			fmt.Fprintf(stderr, "cdc-router quarantine discard: no record %d in %s.quarantine\n", id, schema)
			missing = append(missing, strconv.FormatInt(id, 10))
		default:
			fmt.Fprintf(stdout, "record %d was already %s at %s; unchanged\n", id, rec.HandledHow,
				rec.HandledAt.UTC().Format(time.RFC3339))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("no such records: %s", strings.Join(missing, ", "))
	}
	return nil
}
