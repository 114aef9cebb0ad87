package mapping

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/cdc-router/cdc-router/decode/internal/pgtext"
)

// Placements of table.fields.additional.placement that the mapping accepts.
const (
	PlaceHeader   = "header"
	PlaceEnvelope = "envelope"
)

// Values of amqp.tombstone.
const (
	TombstoneEmptyBody = "empty-body" // publish a zero-length body with header tombstone=true
	TombstoneDrop      = "drop"       // publish nothing
)

// Values of amqp.topic.target and amqp.routing.key.source.
const (
	TargetRoutingKey = "routing-key" // the routed topic is the routing key on --exchange (default)
	TargetExchange   = "exchange"    // the routed topic names the exchange (Debezium Server's RabbitMQ sink)
	SourceStatic     = "static"      // the routing key is amqp.routing.key (default "")
	SourceKey        = "key"         // the routing key is the key column's value
	SourceTopic      = "topic"       // the routing key is the routed topic, as the exchange name is
)

// Mapping reads an outbox table of another shape, configured with Debezium's Outbox Event Router option
// names (and the router's own under amqp.). The zero value is not useful: use ParseMapping or LoadMapping,
// which apply Debezium's defaults. Columns are resolved once per Relation message (see Resolve).
type Mapping struct {
	IDColumn            string      // table.field.event.id, default id: message_id and header id
	KeyColumn           string      // table.field.event.key, default aggregateid: the ordering lane and header KeyHeader; empty: none
	PayloadColumn       string      // table.field.event.payload, default payload: the body
	TimestampColumn     string      // table.field.event.timestamp, default unset: the commit time
	TypeColumn          string      // table.field.event.type, default type: the AMQP type property when present; empty: none
	SchemaVersionColumn string      // table.field.event.schema.version, default unset: header schema_version
	RouteColumn         string      // route.by.field, default aggregatetype
	TopicRegex          string      // route.topic.regex, default (?<routedByValue>.*)
	TopicReplacement    string      // route.topic.replacement, default outbox.event.${routedByValue}
	Additional          []Placement // table.fields.additional.placement
	Properties          []Property  // amqp.property.<name>=<column>: per-row AMQP properties, in option order
	HeadersJSONColumn   string      // amqp.headers.json, default unset: a JSON-object column spread into headers
	EnvelopeJSON        []string    // amqp.envelope.json: columns of envelope placements nested as JSON, not as strings
	AdditionalMissing   string      // table.field.additional.missing: error (default) or ignore
	TombstoneOnEmpty    bool        // route.tombstone.on.empty.payload, default false
	ExpandJSON          bool        // table.expand.json.payload, default false: matters only in an envelope body
	TracingColumn       string      // tracing.span.context.field, default tracingspancontext (used when present); empty: none
	KeyHeader           string      // amqp.key.header, default key
	Tombstone           string      // amqp.tombstone: empty-body (default) or drop
	ContentType         string      // amqp.content.type, default from the payload column's type
	ValidateJSON        bool        // amqp.validate.json, default false: quarantine a text payload that is not JSON when the content type is JSON
	TimestampUnit       string      // amqp.timestamp.unit for an integer timestamp column: ms (default) or us
	TopicTarget         string      // amqp.topic.target: routing-key (default) or exchange
	RoutingKeySource    string      // amqp.routing.key.source with target exchange: static (default), key or topic
	StaticRoutingKey    string      // amqp.routing.key with source static, default ""
	// Table is the outbox table this mapping reads (the router's own option table, schema.table): needed
	// when run reads several tables (--table a,b), optional with one. Empty: the only --table.
	Table string

	fields     map[string]string // option → the JSON field its column:field value names (key, route.by.field, type)
	typeSet    bool              // table.field.event.type was given: a column of another type is then refused, not left unused
	tracingSet bool              // tracing.span.context.field was given: the column is then required
	route      *topicRoute
}

// Placement is one item of table.fields.additional.placement: column:placement[:alias].
type Placement struct {
	Column, Where, Alias string
}

// LoadMapping reads a mapping file (see ParseMapping); errors name the file.
func LoadMapping(path string) (*Mapping, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--config: %w", err)
	}
	m, err := ParseMapping(string(b))
	if err != nil {
		return nil, fmt.Errorf("--config %s: %w", path, err)
	}
	return m, nil
}

// ParseMapping reads a mapping in Java Properties format (key=value lines, # comments), with Debezium's
// option names, optionally under a connector's transforms.<name>. prefix (the transforms and
// transforms.<name>.type lines are then skipped). An unknown option, a repeated one, a bad value, a regex
// RE2 cannot run or a placement AMQP has no meaning for is an error naming the option and the line.
func ParseMapping(text string) (*Mapping, error) {
	m := &Mapping{IDColumn: "id", KeyColumn: "aggregateid", PayloadColumn: "payload", TypeColumn: "type",
		RouteColumn: "aggregatetype", TopicRegex: "(?<routedByValue>.*)", TopicReplacement: "outbox.event.${routedByValue}",
		AdditionalMissing: "error", TracingColumn: "tracingspancontext", KeyHeader: "key", Tombstone: TombstoneEmptyBody,
		TimestampUnit: "ms", TopicTarget: TargetRoutingKey, RoutingKeySource: SourceStatic}
	seen := map[string]int{}
	for _, p := range parseProperties(text) {
		key := p.key
		if key == "transforms" {
			continue
		}
		if rest, ok := strings.CutPrefix(key, "transforms."); ok {
			name, option, ok := strings.Cut(rest, ".")
			if !ok || name == "" || option == "type" {
				continue // transforms=… and transforms.<name>.type=…EventRouter
			}
			key = option
		}
		if line, dup := seen[key]; dup {
			return nil, fmt.Errorf("line %d: %s is also set on line %d: keep one", p.line, key, line)
		}
		seen[key] = p.line
		if err := m.set(key, strings.TrimSpace(p.value)); err != nil {
			return nil, fmt.Errorf("line %d: %w", p.line, err)
		}
	}
	if err := m.checkTarget(seen); err != nil {
		return nil, err
	}
	for _, c := range m.EnvelopeJSON {
		if !slices.ContainsFunc(m.Additional, func(p Placement) bool { return p.Column == c && p.Where == PlaceEnvelope }) {
			return nil, fmt.Errorf("line %d: amqp.envelope.json names %s, which no table.fields.additional.placement item "+
				"places in the envelope: add %s:envelope, or remove it from amqp.envelope.json", seen["amqp.envelope.json"], c, c)
		}
	}
	if m.ValidateJSON && m.ContentType != "" && !jsonMediaType(m.ContentType) {
		return nil, fmt.Errorf("line %d: amqp.validate.json=true checks payloads sent as JSON, but amqp.content.type=%s "+
			"is not JSON: remove one of them", seen["amqp.validate.json"], m.ContentType)
	}
	route, err := compileTopicRoute(m.TopicRegex, m.TopicReplacement)
	if err != nil {
		for _, option := range []string{"route.topic.regex", "route.topic.replacement"} {
			if line, ok := seen[option]; ok && strings.HasPrefix(err.Error(), option) {
				return nil, fmt.Errorf("line %d: %w", line, err)
			}
		}
		return nil, err // a default the other option does not fit, e.g. a replacement naming ${routedByValue}
	}
	m.route = route
	return m, nil
}

// set applies one option.
func (m *Mapping) set(key, v string) error {
	columns := map[string]*string{
		"table.field.event.id": &m.IDColumn, "table.field.event.key": &m.KeyColumn,
		"table.field.event.payload": &m.PayloadColumn, "table.field.event.timestamp": &m.TimestampColumn,
		"table.field.event.type": &m.TypeColumn, "table.field.event.schema.version": &m.SchemaVersionColumn,
		"route.by.field": &m.RouteColumn, "tracing.span.context.field": &m.TracingColumn,
	}
	if p, ok := columns[key]; ok {
		m.typeSet = m.typeSet || key == "table.field.event.type"
		m.tracingSet = m.tracingSet || key == "tracing.span.context.field"
		if column, field, ok := strings.Cut(v, ":"); ok && jsonFieldOptions[key] {
			if column == "" || field == "" {
				return fmt.Errorf("%s=%s: write column:field, the JSON column and the name of its top-level field", key, v)
			}
			if m.fields == nil {
				m.fields = map[string]string{}
			}
			v, m.fields[key] = column, field
		} else if ok && key == "table.field.event.id" {
			return fmt.Errorf("%s=%s: the id cannot be a field of a JSON column (the snapshot and quarantine replay look "+
				"rows up by the id column): name a column, or a generated column on PostgreSQL 18", key, v)
		}
		switch {
		case v != "":
			*p = v
		case switchable[key]:
			*p = "" // switched off: no key (order per routing value), no type, no trace context, …
		default:
			return fmt.Errorf("%s is empty: name a column of the outbox table (this option cannot be switched off)", key)
		}
		return nil
	}
	if name, ok := strings.CutPrefix(key, "amqp.property."); ok {
		return m.setProperty(name, v)
	}
	switch key {
	case "route.topic.regex":
		m.TopicRegex = v
	case "route.topic.replacement":
		m.TopicReplacement = v
	case "table.fields.additional.placement":
		return m.setPlacements(v)
	case "route.tombstone.on.empty.payload", "table.expand.json.payload", "amqp.validate.json":
		b, err := strconv.ParseBool(v)
		if err != nil || (v != "true" && v != "false") {
			return fmt.Errorf("%s=%q: use true or false", key, v)
		}
		switch key {
		case "table.expand.json.payload":
			m.ExpandJSON = b
		case "amqp.validate.json":
			m.ValidateJSON = b
		default:
			m.TombstoneOnEmpty = b
		}
	case "table.field.additional.missing":
		return oneOf(key, v, &m.AdditionalMissing, "error", "ignore")
	case "table.op.invalid.behavior":
		var behaviour string
		if err := oneOf(key, strings.ToLower(v), &behaviour, "warn", "error", "fatal"); err != nil {
			return err
		}
		if behaviour == "fatal" {
			return fmt.Errorf("table.op.invalid.behavior=fatal is not supported: the router never reads updates (the publication " +
				"publishes inserts), so use warn or remove the option")
		}
	case "tracing.operation.name", "tracing.with.context.field.only":
		// Spans are not created, so these change nothing; accepted so that a Debezium file loads as is.
	case "table.json.payload.null.behavior", "table.json.payload.empty.array.behavior", "field.name.adjustment.mode":
		defaults := map[string]string{"table.json.payload.null.behavior": "ignore",
			"table.json.payload.empty.array.behavior": "ignore", "field.name.adjustment.mode": "none"}
		if v != defaults[key] {
			return fmt.Errorf("%s=%s is not supported: the body is the payload as stored (no Kafka Connect conversion), "+
				"so only the default %s applies; remove the option", key, v, defaults[key])
		}
	case "table":
		if _, _, ok := pgtext.SplitTable(v); !ok {
			return fmt.Errorf("table=%q: name the outbox table this file maps, as schema.table", v)
		}
		m.Table = pgtext.QualifiedTable(v)
	case "amqp.envelope.json":
		for c := range strings.SplitSeq(v, ",") {
			if c = strings.TrimSpace(c); c != "" {
				m.EnvelopeJSON = append(m.EnvelopeJSON, c)
			}
		}
		if len(m.EnvelopeJSON) == 0 {
			return fmt.Errorf("amqp.envelope.json is empty: list the envelope placements' columns to nest as JSON, or remove the option")
		}
	case "amqp.headers.json":
		if v == "" {
			return fmt.Errorf("amqp.headers.json is empty: name the column holding a JSON object of headers, or remove the option")
		}
		m.HeadersJSONColumn = v
	case "amqp.key.header":
		if v == "" || len(v) > maxShortString {
			return fmt.Errorf("amqp.key.header must be a header name of 1 to 255 bytes")
		}
		m.KeyHeader = v
	case "amqp.tombstone":
		return oneOf(key, v, &m.Tombstone, TombstoneEmptyBody, TombstoneDrop)
	case "amqp.content.type":
		m.ContentType = v
	case "amqp.timestamp.unit":
		return oneOf(key, v, &m.TimestampUnit, "ms", "us")
	case "amqp.topic.target":
		return oneOf(key, v, &m.TopicTarget, TargetRoutingKey, TargetExchange)
	case "amqp.routing.key.source":
		return oneOf(key, v, &m.RoutingKeySource, SourceStatic, SourceKey, SourceTopic)
	case "amqp.routing.key":
		if len(v) > maxShortString {
			return fmt.Errorf("amqp.routing.key is %d bytes, AMQP allows 255: shorten it", len(v))
		}
		m.StaticRoutingKey = v
	default:
		return fmt.Errorf("unknown option %q: see docs/migrating-from-polling.md for the options the router reads", key)
	}
	return nil
}

// jsonFieldOptions are the column options whose value may be column:field, a top-level field of a JSON
// column (json, jsonb, or text holding JSON).
var jsonFieldOptions = map[string]bool{"table.field.event.key": true, "route.by.field": true, "table.field.event.type": true}

// switchable are the column options an empty value switches off; the others name a column every event needs.
var switchable = map[string]bool{"table.field.event.key": true, "table.field.event.timestamp": true,
	"table.field.event.type": true, "table.field.event.schema.version": true, "tracing.span.context.field": true}

// maxShortString is the longest AMQP shortstr (header names, routing keys).
const maxShortString = 255

func oneOf(key, v string, dst *string, allowed ...string) error {
	for _, a := range allowed {
		if v == a {
			*dst = v
			return nil
		}
	}
	return fmt.Errorf("%s=%q: use %s", key, v, pgtext.OrList(allowed))
}

// setPlacements parses table.fields.additional.placement: comma-separated column:placement[:alias].
func (m *Mapping) setPlacements(v string) error {
	for item := range strings.SplitSeq(v, ",") {
		parts := strings.Split(strings.TrimSpace(item), ":")
		for i := range parts {
			parts[i] = strings.TrimSpace(parts[i])
		}
		if len(parts) < 2 || len(parts) > 3 || parts[0] == "" {
			return fmt.Errorf("table.fields.additional.placement item %q must be column:placement or column:placement:alias", item)
		}
		p := Placement{Column: parts[0], Where: parts[1], Alias: parts[0]}
		if len(parts) == 3 && parts[2] != "" {
			p.Alias = parts[2]
		}
		switch p.Where {
		case PlaceHeader, PlaceEnvelope:
		case "partition":
			return fmt.Errorf("table.fields.additional.placement item %q: the partition placement has no AMQP meaning "+
				"(a queue has no partitions; consumers that need per-key order bind one queue per key range with a "+
				"consistent-hash exchange on the key header): place the column in header or envelope", item)
		default:
			return fmt.Errorf("table.fields.additional.placement item %q: placement %q must be header or envelope", item, p.Where)
		}
		if p.Where == PlaceEnvelope && p.Alias == "payload" {
			return fmt.Errorf("table.fields.additional.placement item %q: the envelope alias payload is the payload's own field: choose another alias", item)
		}
		if len(p.Alias) > maxShortString {
			return fmt.Errorf("table.fields.additional.placement item %q: the alias is over 255 bytes", item)
		}
		m.Additional = append(m.Additional, p)
	}
	return nil
}

// envelope reports whether the body is an envelope object rather than the bare payload.
func (m *Mapping) envelope() bool {
	for _, p := range m.Additional {
		if p.Where == PlaceEnvelope {
			return true
		}
	}
	return false
}

// HeaderNames lists the header names m's configuration chooses, each with the option that chose it: the
// key header and the aliases of header placements.
func (m *Mapping) HeaderNames() [][2]string {
	var out [][2]string
	if m.KeyColumn != "" {
		out = append(out, [2]string{m.KeyHeader, "amqp.key.header"})
	}
	for _, p := range m.Additional {
		if p.Where == PlaceHeader {
			out = append(out, [2]string{p.Alias, "table.fields.additional.placement"})
		}
	}
	return out
}

// checkTarget refuses the routing key options where they mean nothing: without amqp.topic.target=exchange,
// a static key with another source, and the key source without a key column.
func (m *Mapping) checkTarget(seen map[string]int) error {
	for _, option := range []string{"amqp.routing.key.source", "amqp.routing.key"} {
		if line, ok := seen[option]; ok && m.TopicTarget != TargetExchange {
			return fmt.Errorf("line %d: %s applies only with amqp.topic.target=exchange (the routed topic is otherwise the "+
				"routing key): set amqp.topic.target=exchange or remove the option", line, option)
		}
	}
	if line, ok := seen["amqp.routing.key"]; ok && m.RoutingKeySource != SourceStatic {
		return fmt.Errorf("line %d: amqp.routing.key applies only with amqp.routing.key.source=static: remove one of them", line)
	}
	if m.RoutingKeySource == SourceKey && m.KeyColumn == "" {
		return fmt.Errorf("line %d: amqp.routing.key.source=key needs a key column: set table.field.event.key", seen["amqp.routing.key.source"])
	}
	return nil
}

// exchangeRoutingKey is the routing key of an event under amqp.topic.target=exchange, whose routed topic
// names the exchange: amqp.routing.key, the key (key: its text; bytea: its bytes; NULL: empty) or the topic.
func (m *Mapping) exchangeRoutingKey(topic, key string) string {
	switch m.RoutingKeySource {
	case SourceKey:
		return key
	case SourceTopic:
		return topic
	}
	return m.StaticRoutingKey
}
