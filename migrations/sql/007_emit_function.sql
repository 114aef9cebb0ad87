{{if .EmitFunction -}}
-- Only with `migrate --emit-function`: {{.Schema}}.emit writes one event without a table, as a transactional
-- logical decoding message with the prefix the router reads (`run --message-prefix`), in the caller's
-- transaction: it is decoded at commit, in the transaction's order, and never if the transaction rolls
-- back. Nothing is stored, so a snapshot or backfill cannot re-read it. It returns the event's id.
-- The version is the caller's: no table holds the previous one (keep it on the business row).
CREATE OR REPLACE FUNCTION {{.Schema}}.emit(
    aggregate_type    text,
    aggregate_id      text,
    aggregate_version bigint,
    event_type        text,
    payload           jsonb,
    headers           jsonb DEFAULT '{}',
    schema_version    integer DEFAULT 1
) RETURNS uuid
LANGUAGE plpgsql VOLATILE
AS {{.Dollar}}
DECLARE
    event_id uuid := gen_random_uuid();
BEGIN
    IF aggregate_type IS NULL OR aggregate_id IS NULL OR aggregate_version IS NULL OR event_type IS NULL
       OR payload IS NULL OR schema_version IS NULL THEN
        RAISE EXCEPTION 'cdc-router emit: only headers may be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF headers IS NOT NULL AND jsonb_typeof(headers) <> 'object' THEN
        RAISE EXCEPTION 'cdc-router emit: headers must be a JSON object, not %', jsonb_typeof(headers)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM pg_logical_emit_message(true, {{.MessagePrefixLiteral}}, jsonb_build_object(
        'id', event_id,
        'aggregate_type', aggregate_type,
        'aggregate_id', aggregate_id,
        'aggregate_version', aggregate_version,
        'event_type', event_type,
        'schema_version', schema_version,
        'payload', payload,
        'headers', coalesce(headers, '{}'),
        'occurred_at', now())::text);
    RETURN event_id;
END
{{.Dollar}};
{{- end}}
