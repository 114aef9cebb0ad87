package decode

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"

	"github.com/cdc-router/cdc-router/internal/cdc"
)

// An emitted message is authenticated by the MAC that <schema>.emit (migrations/sql/007_emit_function.sql)
// puts in front of the envelope:
//
//	v1:<key id>:<64 hex digits>\n<envelope>
//
// The MAC is HMAC-SHA256, with the key <schema>.emit_keys holds under that id, of
//
//	"cdc-router emit v1\n" <the transaction's xid, low 32 bits, in decimal> "\n" <envelope>
//
// pg_logical_emit_message is executable by every role, but only emit (SECURITY DEFINER, EXECUTE granted
// to the writers the operator named) can read the key; binding the xid means a signed message copied into
// another transaction does not verify there.

// EmitMACVersion starts the signature line of an emitted message.
const EmitMACVersion = "v1"

// emitMACLabel starts the text an emitted message's MAC is computed over.
const emitMACLabel = "cdc-router emit v1\n"

// maxSignatureLine bounds the signature line: "v1:", a key id of up to 10 digits, ":", 64 hex digits, "\n".
const maxSignatureLine = 3 + 10 + 1 + 64 + 1

// SetEmitKeys replaces Config.EmitKeys for the messages decoded from now on (a key rotated in while the
// stream runs); it is not safe to call during Decode.
func (d *Decoder) SetEmitKeys(keys map[uint32][]byte) { d.cfg.EmitKeys = keys }

// EmitMAC is the MAC of envelope emitted in the transaction with xid (its low 32 bits) under key.
func EmitMAC(key []byte, xid uint32, envelope []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(emitMACLabel))
	m.Write(strconv.AppendUint(nil, uint64(xid), 10))
	m.Write([]byte{'\n'})
	m.Write(envelope)
	return m.Sum(nil)
}

// SignEmitted is the content <schema>.emit writes for envelope in the transaction with xid: the signature
// line, then the envelope. Tests use it to write what emit writes.
func SignEmitted(keyID uint32, key []byte, xid uint32, envelope []byte) []byte {
	line := fmt.Sprintf("%s:%d:%s\n", EmitMACVersion, keyID, hex.EncodeToString(EmitMAC(key, xid, envelope)))
	return append([]byte(line), envelope...)
}

// verifyEmitted returns the envelope of a message with the prefix emitted in the transaction with xid, or,
// when its MAC is missing or does not verify with keys, why it is not published (the quarantine reason).
// It reads at most the signature line before deciding, and compares in constant time.
func verifyEmitted(keys map[uint32][]byte, xid uint32, content []byte) ([]byte, string) {
	const why = "unauthenticated emitted message: "
	nl := bytes.IndexByte(content[:min(len(content), maxSignatureLine)], '\n')
	if t := bytes.TrimLeft(content[:min(len(content), 64)], " \t\r\n"); len(t) > 0 && t[0] == '{' {
		return nil, why + "it carries no MAC: written by pg_logical_emit_message directly, or by an emit function " +
			"from before emitted events were signed (run `cdc-router migrate --emit-function` and emit through " +
			"<schema>.emit; docs/howto/rotate-emit-keys.md#what-the-router-needs)"
	}
	if nl < 0 {
		return nil, why + "it does not start with a signature line (v1:<key id>:<MAC>)"
	}
	fields := bytes.Split(content[:nl], []byte{':'})
	if len(fields) != 3 || string(fields[0]) != EmitMACVersion {
		return nil, why + "it does not start with a signature line (v1:<key id>:<MAC>)"
	}
	id, err := strconv.ParseUint(string(fields[1]), 10, 32)
	mac := make([]byte, sha256.Size)
	if n, herr := hex.Decode(mac, fields[2]); err != nil || herr != nil || n != sha256.Size || len(fields[2]) != 2*sha256.Size {
		return nil, why + "its signature line is malformed (v1:<key id>:<64 hex digits>)"
	}
	key, ok := keys[uint32(id)]
	if !ok {
		return nil, fmt.Sprintf(why+"it is signed with key %d, which the router does not hold: forged, or signed "+
			"before the router could reload the keys (a key made active early; docs/howto/rotate-emit-keys.md#rotate-the-key)", id)
	}
	envelope := content[nl+1:]
	if !hmac.Equal(mac, EmitMAC(key, xid, envelope)) {
		return nil, fmt.Sprintf(why+"its MAC (key %d) does not match: forged, altered, or copied from another transaction", id)
	}
	return envelope, ""
}

// MaxUnauthenticatedStored bounds what the quarantine keeps of an unauthenticated message's content (with
// its length and SHA-256): anyone may write one, so a record must not hold what they chose whole. The id,
// types and aggregate of an envelope fit in it.
const MaxUnauthenticatedStored = 1 << 10

// quarantineUnauthenticated hands an unauthenticated message to the Handler as a Quarantine: at most
// MaxUnauthenticatedStored bytes of its content and no event id (the writer chose it), so that parsing and
// storing it costs the router little whatever was written.
func (d *Decoder) quarantineUnauthenticated(walStart cdc.LSN, ordinal int, content []byte, reason string, h Handler) error {
	v := cdc.RawValue{Text: bytes.Clone(content[:min(len(content), MaxUnauthenticatedStored)]), Size: int64(len(content)),
		SHA256: sha256.Sum256(content)}
	q := cdc.Quarantined{LSN: walStart, Ordinal: ordinal, CommitLSN: d.commitLSN, Table: MessageTable + d.cfg.MessagePrefix,
		Columns: map[string]cdc.RawValue{MessageColumn: v}, Reason: reason}
	if err := h.Quarantine(q); err != nil {
		return fmt.Errorf("decode: quarantine message at %s: %w", walStart, err)
	}
	return nil
}
