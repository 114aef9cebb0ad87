package inbox

// queries are the statements of a Processor with its schema name filled in.
type queries struct {
	insertInbox, inboxEntry, setStatus, deleteInbox   string
	ensureAggregate, lockAggregate, setApplied, state string
	park, takeParked, dropStaleParked                 string
	fail, repair, prune                               string
}

func newQueries(schema string) queries {
	q := queries{
		insertInbox: `INSERT INTO {schema}.inbox (event_id, fingerprint, aggregate_type, aggregate_id, aggregate_version, status)
			VALUES ($1, $2, $3, $4, $5, 'applied') ON CONFLICT (event_id) DO NOTHING`,
		inboxEntry:  `SELECT fingerprint FROM {schema}.inbox WHERE event_id = $1`,
		setStatus:   `UPDATE {schema}.inbox SET status = $2 WHERE event_id = $1`,
		deleteInbox: `DELETE FROM {schema}.inbox WHERE event_id = $1`,

		ensureAggregate: `INSERT INTO {schema}.aggregate (aggregate_type, aggregate_id) VALUES ($1, $2)
			ON CONFLICT (aggregate_type, aggregate_id) DO NOTHING`,
		lockAggregate: `SELECT applied_version, baseline_version FROM {schema}.aggregate
			WHERE aggregate_type = $1 AND aggregate_id = $2 FOR UPDATE`,
		setApplied: `UPDATE {schema}.aggregate SET applied_version = $3, updated_at = now()
			WHERE aggregate_type = $1 AND aggregate_id = $2`,
		state: `SELECT applied_version, baseline_version FROM {schema}.aggregate
			WHERE aggregate_type = $1 AND aggregate_id = $2`,

		park: `INSERT INTO {schema}.parked (event_id, aggregate_type, aggregate_id, aggregate_version, event_type,
			schema_version, commit_lsn, backfill, payload, headers)
			VALUES ($1, $2, $3, $4, $5, $6, $7::text::pg_lsn, $8, $9, $10)`,
		takeParked: `DELETE FROM {schema}.parked WHERE event_id = (
				SELECT event_id FROM {schema}.parked
				WHERE aggregate_type = $1 AND aggregate_id = $2 AND aggregate_version = $3
				ORDER BY parked_at, event_id LIMIT 1)
			RETURNING event_id, aggregate_version, event_type, schema_version, commit_lsn::text, backfill, payload, headers`,
		dropStaleParked: `WITH gone AS (
				DELETE FROM {schema}.parked
				WHERE aggregate_type = $1 AND aggregate_id = $2 AND aggregate_version <= $3
				RETURNING event_id)
			UPDATE {schema}.inbox i SET status = 'stale' FROM gone WHERE i.event_id = gone.event_id`,

		fail: `INSERT INTO {schema}.failed (event_id, reason, detail, aggregate_type, aggregate_id, aggregate_version,
			event_type, schema_version, stored_fingerprint, received_fingerprint, payload, headers)
			VALUES (NULLIF($1, ''), $2, $3, NULLIF($4, ''), NULLIF($5, ''), $6, $7, $8, $9, $10, $11, $12)
			ON CONFLICT (event_id, reason, received_fingerprint) DO UPDATE
			SET attempts = {schema}.failed.attempts + 1, last_failed_at = now(), detail = EXCLUDED.detail`,
		repair: `UPDATE {schema}.aggregate
			SET applied_version = $4, baseline_version = $4, updated_at = now()
			WHERE aggregate_type = $1 AND aggregate_id = $2
			  AND applied_version = $3 AND applied_version < $4`,
		prune: `DELETE FROM {schema}.inbox i USING {schema}.aggregate a
			WHERE i.received_at < $1 AND i.status IN ('applied', 'stale')
			  AND a.aggregate_type = i.aggregate_type AND a.aggregate_id = i.aggregate_id
			  AND i.aggregate_version <= a.applied_version`,
	}
	for _, s := range []*string{&q.insertInbox, &q.inboxEntry, &q.setStatus, &q.deleteInbox, &q.ensureAggregate, &q.lockAggregate,
		&q.setApplied, &q.state, &q.park, &q.takeParked, &q.dropStaleParked, &q.fail, &q.repair, &q.prune} {
		*s = inSchema(*s, schema)
	}
	return q
}
