package mapping

import (
	"encoding/json"
	"strings"

	"github.com/cdc-router/cdc-router/decode/internal/pgtext"
	"github.com/cdc-router/cdc-router/internal/cdc"
)

// validateJSON applies amqp.validate.json to a mapped event: when it is on and the message goes out as
// JSON (its content type is application/json or a +json type), a payload PostgreSQL did not check as JSON
// (text, varchar or bytea, not json or jsonb) must be JSON, or the row is quarantined, as the native shape
// quarantines a payload that is not. A tombstone's empty body is exempt. raw is the payload's bytes, before
// any envelope.
func (m *Mapping) validateJSON(raw []byte, payloadOID uint32, mapped *cdc.Mapped) *pgtext.RowError {
	if !m.ValidateJSON || mapped.Tombstone || payloadOID == pgtext.OIDJSON || payloadOID == pgtext.OIDJSONB || !jsonMediaType(mapped.ContentType) {
		return nil
	}
	if !json.Valid(raw) {
		return pgtext.RowErrorf("payload is not valid JSON (amqp.validate.json), though the message's content type is %s", mapped.ContentType)
	}
	return nil
}

// jsonMediaType reports whether a content type is JSON: application/json or a structured +json type such
// as application/vnd.acme+json, parameters and case aside.
func jsonMediaType(contentType string) bool {
	media, _, _ := strings.Cut(contentType, ";")
	media = strings.ToLower(strings.TrimSpace(media))
	return media == "application/json" || strings.HasPrefix(media, "application/") && strings.HasSuffix(media, "+json")
}
