-- What a running router's publishing does now (issue 37): its in-flight limit (cdc_router_window_limit:
-- the sum over its lanes, adapted to the confirm round trip with --adaptive-window) and the events it has
-- handed to the broker and not yet seen confirmed (cdc_router_inflight_events), refreshed at every
-- heartbeat, so that `cdc-router status` shows them without a metrics scrape. Both NULL while the process
-- does not publish (starting, standing by, stopped) and for a router older than 019, which does not write them.
DO {{.Dollar}}
DECLARE
    r regclass := format('%I.routers', {{.SchemaLiteral}})::regclass;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = r AND attname = 'inflight_events' AND NOT attisdropped) THEN
        EXECUTE format('ALTER TABLE %s ADD COLUMN IF NOT EXISTS window_limit integer, '
            'ADD COLUMN IF NOT EXISTS inflight_events integer', r);
    END IF;
END
{{.Dollar}};
