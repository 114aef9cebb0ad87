-- Progress inside a transaction as what is confirmed (issue 36, finding 3): besides mark_done, the count of
-- the oldest unacknowledged transaction's items confirmed without a gap (010), a stored position records
-- mark_seen, one past the last confirmed item, and mark_open, the items between mark_done and mark_seen that
-- are not confirmed (varints of their distances, about a byte per item; bounded by the router's in-flight
-- window and held events). A replay passes over every confirmed item, not only the prefix: behind a hot
-- aggregate's held events, the events of the other aggregates confirmed long before are not published again.
-- Both NULL when the record says no more than mark_done (a router of 010 reads that alone, which stays true).
DO {{.Dollar}}
DECLARE
    p regclass := format('%I.positions', {{.SchemaLiteral}})::regclass;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = p AND attname = 'mark_open' AND NOT attisdropped) THEN
        EXECUTE format('ALTER TABLE %s ADD COLUMN IF NOT EXISTS mark_seen bigint, '
            'ADD COLUMN IF NOT EXISTS mark_open bytea', p);
    END IF;
END
{{.Dollar}};
