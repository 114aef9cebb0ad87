-- The outbox table, range-partitioned by occurred_at (`cdc-router migrate --partitioned`), so that old rows
-- go by dropping a partition instead of a DELETE. A unique key of a partitioned table must include the
-- partition key: the key snapshots page by is (aggregate_type, aggregate_id, aggregate_version, occurred_at)
-- and the primary key is (id, occurred_at). docs/partitioning.md says what that changes.
CREATE TABLE IF NOT EXISTS {{.Table}} (
    id                uuid NOT NULL,
    aggregate_type    text NOT NULL,
    aggregate_id      text NOT NULL,
    aggregate_version bigint NOT NULL,
    event_type        text NOT NULL,
    schema_version    int NOT NULL DEFAULT 1,
    payload           jsonb NOT NULL,
    headers           jsonb NOT NULL DEFAULT '{}',
    occurred_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (id, occurred_at),
    UNIQUE (aggregate_type, aggregate_id, aggregate_version, occurred_at)
) PARTITION BY RANGE (occurred_at);

-- The partition of the current {{.Interval}} (UTC) and of the next {{.Ahead}}, each named <table>_pYYYYMMDD after
-- its first day and created only when missing, and a default partition <table>_default for rows outside
-- them, so that a writer's insert never fails for want of a partition. Running `migrate --partitioned`
-- again (daily, from cron) adds the coming ones. A range already covered by another partition is left alone;
-- a range whose rows are already in the default partition is refused, naming the procedure that moves them.
-- Creating a partition locks the outbox ACCESS EXCLUSIVE, and while that lock waits (for a long transaction
-- such as the router's initial snapshot) every insert waits behind it: the wait is bounded by a lock_timeout
-- of 5 s, after which the run is refused and changes nothing.
DO {{.Dollar}}
DECLARE
    parent   regclass := to_regclass({{.TableLiteral}});
    nsp      text;
    base     text;
    first    timestamp;
    step     interval := {{.StepLiteral}}::interval;
    lo       timestamptz;
    hi       timestamptz;
    part     text;
    old_tz   text := current_setting('TimeZone');
    old_lock text := current_setting('lock_timeout');
BEGIN
    PERFORM set_config('TimeZone', 'UTC', true);
    PERFORM set_config('lock_timeout', '5s', true);
    SELECT n.nspname, c.relname INTO nsp, base FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE c.oid = parent;
    IF (SELECT relkind FROM pg_class WHERE oid = parent) <> 'p' THEN
        RAISE EXCEPTION 'the outbox table %.% exists and is not partitioned, and --partitioned never converts a table: '
            'run migrate without --partitioned, or move to a partitioned outbox as docs/partitioning.md describes', nsp, base;
    END IF;
    first := date_trunc({{.IntervalLiteral}}, now() AT TIME ZONE 'UTC');
    FOR i IN 0..{{.Ahead}} LOOP
        lo := (first + i * step) AT TIME ZONE 'UTC';
        hi := (first + (i + 1) * step) AT TIME ZONE 'UTC';
        part := left(base, 53) || '_p' || to_char(lo, 'YYYYMMDD');
        CONTINUE WHEN EXISTS (SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE n.nspname = nsp AND c.relname = part);
        BEGIN
            EXECUTE format('CREATE TABLE %I.%I PARTITION OF %s FOR VALUES FROM (%L) TO (%L)', nsp, part, parent, lo, hi);
        EXCEPTION
            WHEN lock_not_available THEN
                RAISE EXCEPTION 'could not lock %.% within 5 s to add the partition %: a long transaction reads or writes it '
                    '(the router''s initial snapshot, for example), and waiting would hold up every insert: run migrate '
                    '--partitioned again later', nsp, base, part;
            WHEN invalid_object_definition THEN -- another partition covers (part of) the range: the user's own
                RAISE NOTICE 'partition % not created: another partition of %.% overlaps [%, %)', part, nsp, base, lo, hi;
            WHEN check_violation THEN
                RAISE EXCEPTION 'the default partition of %.% holds rows from [%, %), so no partition can be created for that range: '
                    'move them into a partition of their own as docs/partitioning.md ("Rows in the default partition") describes, '
                    'then run migrate --partitioned again', nsp, base, lo, hi;
        END;
    END LOOP;
    IF (SELECT partdefid FROM pg_partitioned_table WHERE partrelid = parent) = 0 THEN
        BEGIN
            EXECUTE format('CREATE TABLE %I.%I PARTITION OF %s DEFAULT', nsp, left(base, 55) || '_default', parent);
        EXCEPTION
            WHEN lock_not_available THEN
                RAISE EXCEPTION 'could not lock %.% within 5 s to add its default partition: a long transaction reads or '
                    'writes it (the router''s initial snapshot, for example), and waiting would hold up every insert: '
                    'run migrate --partitioned again later', nsp, base;
        END;
    END IF;
    PERFORM set_config('TimeZone', old_tz, true);
    PERFORM set_config('lock_timeout', old_lock, true);
END
{{.Dollar}};
