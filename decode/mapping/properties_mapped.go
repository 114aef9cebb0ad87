package mapping

import (
	"fmt"
	"slices"

	"github.com/cdc-router/cdc-router/decode/internal/pgtext"
	"github.com/cdc-router/cdc-router/internal/cdc"
)

// Property is one amqp.property.<name>=<column> option: the AMQP property Name takes the row's Column.
type Property struct {
	Name, Column string
}

// rowProperties are the AMQP properties a column may set per row (amqp.property.<name>). type is not
// among them: table.field.event.type is its column. user_id is not either: RabbitMQ closes the channel
// when it is not the connection's user.
var rowProperties = []string{"content_type", "content_encoding", "correlation_id", "reply_to", "app_id"}

// propertyTypes are the column types a property column may have.
var propertyTypes = []uint32{pgtext.OIDText, pgtext.OIDVarchar, pgtext.OIDUUID}

// setProperty applies amqp.property.<name>=<column>.
func (m *Mapping) setProperty(name, column string) error {
	option := "amqp.property." + name
	switch {
	case name == "type":
		return fmt.Errorf("%s: the type property comes from table.field.event.type: name the column there", option)
	case name == "user_id":
		return fmt.Errorf("%s is not supported: RabbitMQ closes the channel for a user_id other than the router's user", option)
	case !slices.Contains(rowProperties, name):
		return fmt.Errorf("unknown option %q: amqp.property.<name> sets the property of that name per row, for %s", option, pgtext.OrList(rowProperties))
	case column == "":
		return fmt.Errorf("%s is empty: name a column of the outbox table, or remove the option", option)
	}
	m.Properties = append(m.Properties, Property{Name: name, Column: column})
	return nil
}

// setProperties sets the AMQP properties of the row's property columns on mapped (first the roles at
// base, one per Property): a NULL leaves the table-wide value (the content type of the payload column or
// amqp.content.type; unset for the others). A value over 255 bytes, AMQP's short string, quarantines the
// row, naming the option.
func (t mappedTuple) setProperties(base int, mapped *cdc.Mapped) *pgtext.RowError {
	for i, p := range t.rel.mapping.Properties {
		v, _, ok := t.mappedValue(base + i)
		if !ok {
			continue
		}
		if len(v) > maxShortString {
			return pgtext.RowErrorf("%s (amqp.property.%s) is %d bytes, AMQP allows 255 for a property", p.Column, p.Name, len(v))
		}
		switch s := string(v); p.Name {
		case "content_type":
			mapped.ContentType = s
		case "content_encoding":
			mapped.ContentEncoding = s
		case "correlation_id":
			mapped.CorrelationID = s
		case "reply_to":
			mapped.ReplyTo = s
		case "app_id":
			mapped.AppID = s
		}
	}
	return nil
}

// headersRole is the role index of the amqp.headers.json column: after the placements and properties.
func (m *Mapping) headersRole() int { return numRoles + len(m.Additional) + len(m.Properties) }

// setJSONHeaders keeps the row's amqp.headers.json column on mapped, for route to spread into headers
// as it spreads the native headers column. A value that is not a JSON object quarantines the row, naming
// the option; NULL adds no header.
func (t mappedTuple) setJSONHeaders(mapped *cdc.Mapped) *pgtext.RowError {
	m := t.rel.mapping
	v, oid, ok := t.mappedValue(m.headersRole())
	if !ok {
		return nil
	}
	if !(oid == pgtext.OIDJSONB || oid == pgtext.OIDJSON) && !pgtext.IsJSONObject(v) || !pgtext.StartsObject(v) {
		return pgtext.RowErrorf("%s (amqp.headers.json) is not a JSON object, so it cannot become headers", m.HeadersJSONColumn)
	}
	mapped.JSONHeaders = append([]byte(nil), v...)
	return nil
}
