package decode

import (
	"fmt"
	"time"

	"github.com/cdc-router/cdc-router/decode/internal/pgtext"
	"github.com/cdc-router/cdc-router/internal/cdc"
)

// Handler receives what Decode finds, in WAL order: Begin, the transaction's inserts (each an Event or a
// Quarantine; an insert that drifted is a Quarantine only with OnDriftQuarantine), then Commit. A non-nil
// error stops Decode, which returns it wrapped; the Decoder must then be discarded. The one call outside
// Begin…Commit is the Quarantine of a non-transactional message with Config.MessagePrefix (CommitLSN zero).
type Handler interface {
	// Begin starts a transaction; commitLSN is the Begin message's final LSN, the commit record's start.
	Begin(commitLSN cdc.LSN) error
	// Event delivers one outbox insert, with CommitLSN, LSN and Ordinal set. Payload and Headers are the
	// Handler's own copies.
	Event(ev cdc.Event) error
	// Quarantine delivers one insert that cannot become an event; LSN is the insert's WAL start and
	// Ordinal its index at that position, so (LSN, Ordinal) names it uniquely and stably across replays.
	Quarantine(q cdc.Quarantined) error
	// Commit ends the transaction; endLSN is CommitMessage.TransactionEndLSN, the position to acknowledge
	// once every event of the transaction is delivered.
	Commit(commitLSN, endLSN cdc.LSN) error
}

// ProtocolError is a message Decode cannot accept: empty, truncated, malformed, of an unknown or
// unsupported type (streaming and two-phase messages need proto_version 2 or more), out of place
// (a change outside Begin…Commit, a Begin inside one) or naming a relation OID without a Relation message.
// It means the stream is broken or misconfigured, never that a row is bad.
type ProtocolError struct {
	Message byte   // the pgoutput message type byte; 0 for an empty message
	Reason  string // what is wrong, one short phrase
}

func (e *ProtocolError) Error() string {
	return fmt.Sprintf("decode: pgoutput message %q: %s", e.Message, e.Reason)
}

func protocolError(msg byte, format string, args ...any) error {
	return &ProtocolError{Message: msg, Reason: fmt.Sprintf(format, args...)}
}

// Decoder decodes the pgoutput messages of one replication connection, in the order received. It keeps
// the relation cache and the open transaction, so it is not safe for concurrent use; after any error, and
// for every new replication connection, use a new Decoder.
type Decoder struct {
	cfg Config
	// outboxes is the mapping of each outbox table (nil: the native shape) by namespace and name (kept apart:
	// a dot may be part of either), from cfg.Table
	// and cfg.MoreTables; names lists them, for DriftError.Outbox.
	outboxes  map[[2]string]*Mapping
	names     []string
	relations map[uint32]*relation // by relation OID; replaced by every Relation message
	inTxn     bool
	commitLSN cdc.LSN // the open transaction's Begin final LSN
	xid       uint32  // the open transaction's (top-level) xid from its Begin, which emitted messages are signed with
	// commitTime is the open (or last) transaction's commit timestamp, from its Begin message.
	commitTime time.Time
	tuple      []value           // scratch for the current change's tuple, reused between messages
	types      map[uint32]string // namespace.name of the non-built-in types Type messages announced, by OID
	// runLSN is the WAL start of the open transaction's last insert and run the number of its inserts at
	// runLSN so far: the next insert at runLSN has ordinal run.
	runLSN cdc.LSN
	run    int
}

// New returns a Decoder for cfg with the defaults applied to its zero fields. New does not validate:
// call cfg.Validate first; a Table without a schema or a name matches no relation.
func New(cfg Config) *Decoder {
	cfg = cfg.withDefaults()
	d := &Decoder{cfg: cfg, outboxes: make(map[[2]string]*Mapping), relations: make(map[uint32]*relation),
		types: make(map[uint32]string)}
	d.addOutbox(cfg.Table, cfg.Mapping)
	for _, t := range cfg.MoreTables {
		d.addOutbox(t.Table, t.Mapping)
	}
	return d
}

// addOutbox adds an outbox table; a table without a schema or a name (which Validate refuses) is none.
func (d *Decoder) addOutbox(table string, m *Mapping) {
	if schema, name, ok := pgtext.SplitTable(table); ok {
		d.outboxes[[2]string{schema, name}] = m
		d.names = append(d.names, QualifiedTable(table))
	}
}

// pgEpoch is PostgreSQL's timestamp epoch: pgoutput's timestamps are microseconds since it.
var pgEpoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// CommitTime is the commit timestamp (the primary's clock) of the transaction of the last Begin: the
// open transaction's inside Begin…Commit, for the metrics of the time from commit to confirm.
func (d *Decoder) CommitTime() time.Time { return d.commitTime }

// Xid is the xid of the transaction of the last Begin: with its commit LSN it names the transaction across
// replays of the slot on one cluster and timeline.
func (d *Decoder) Xid() uint32 { return d.xid }

// Decode decodes one pgoutput message: walData is an XLogData's WALData and walStart its WAL start. Decode
// keeps nothing that aliases walData after it returns and copies no column value whole except into an
// Event. It returns a *ProtocolError for a message it cannot accept, a *DriftError for an insert it
// refuses (see Config.OnDrift), and a Handler's error wrapped.
func (d *Decoder) Decode(walStart cdc.LSN, walData []byte, h Handler) error {
	err := d.decode(walStart, walData, h)
	clear(d.tuple) // drop the scratch tuple's references into walData
	return err
}

func (d *Decoder) decode(walStart cdc.LSN, walData []byte, h Handler) error {
	if len(walData) == 0 {
		return protocolError(0, "empty message")
	}
	t, r := walData[0], &reader{buf: walData[1:]}
	switch t {
	case msgBegin:
		return d.begin(r, h)
	case msgCommit:
		return d.commit(r, h)
	case msgRelation:
		return d.relation(r)
	case msgInsert:
		return d.insert(walStart, r, h)
	case msgUpdate:
		return d.update(r)
	case msgDelete:
		return d.delete(r)
	case msgTruncate:
		return d.truncate(r)
	case msgOrigin:
		r.lsn("origin commit LSN")
		r.cstring("origin name")
	case msgType:
		oid := r.u32("type OID")
		namespace, name := r.cstring("namespace"), r.cstring("type name")
		if r.end() == "" {
			d.types[oid] = string(namespace) + "." + string(name)
		}
	case msgMessage:
		return d.message(walStart, r, h)
	case 'S', 'E', 'c', 'A', 'b', 'P', 'K', 'r', 'p':
		return protocolError(t, "streaming and two-phase messages are not supported: use proto_version 1 without streaming")
	default:
		return protocolError(t, "unknown message type")
	}
	if reason := r.end(); reason != "" {
		return protocolError(t, "%s", reason)
	}
	return nil
}

func (d *Decoder) begin(r *reader, h Handler) error {
	final := r.lsn("final LSN")
	committed := r.lsn("commit timestamp")
	xid := r.u32("xid")
	if reason := r.end(); reason != "" {
		return protocolError(msgBegin, "%s", reason)
	}
	if d.inTxn {
		return protocolError(msgBegin, "Begin %s inside transaction %s", final, d.commitLSN)
	}
	d.inTxn, d.commitLSN, d.xid, d.runLSN, d.run = true, final, xid, 0, 0
	d.commitTime = pgEpoch.Add(time.Duration(int64(committed)) * time.Microsecond)
	if err := h.Begin(final); err != nil {
		return fmt.Errorf("decode: Begin %s: %w", final, err)
	}
	return nil
}

func (d *Decoder) commit(r *reader, h Handler) error {
	r.u8("flags")
	commitLSN := r.lsn("commit LSN")
	endLSN := r.lsn("end LSN")
	r.take(8, "commit timestamp")
	if reason := r.end(); reason != "" {
		return protocolError(msgCommit, "%s", reason)
	}
	if !d.inTxn {
		return protocolError(msgCommit, "Commit %s without Begin", commitLSN)
	}
	if commitLSN != d.commitLSN {
		return protocolError(msgCommit, "commit LSN %s differs from the Begin final LSN %s", commitLSN, d.commitLSN)
	}
	d.inTxn = false
	if err := h.Commit(commitLSN, endLSN); err != nil {
		return fmt.Errorf("decode: Commit %s: %w", commitLSN, err)
	}
	return nil
}

func (d *Decoder) relation(r *reader) error {
	m := r.relation()
	if reason := r.end(); reason != "" {
		return protocolError(msgRelation, "%s", reason)
	}
	d.relations[m.oid] = d.newRelation(m)
	return nil
}
