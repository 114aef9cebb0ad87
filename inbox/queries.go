package inbox

// queries are the statements of a Processor with its schema name filled in. Every one takes the
// consumer name as $1 and touches that consumer's records only.
type queries struct {
	insertInbox, inboxEntry, setStatus, markApplied, deleteInbox, insertSkipped string
	ensureAggregate, lockAggregate, setApplied, state                           string
	park, takeParked, dropStaleParked                                           string
	fail, repair, prune, pruneAttempts, pruneRequests, pruneFailed              string
	countAttempt, attempts, clearAttempts                                       string
	listFailed, failedByID, resolveFailed, failedAgain                          string
	listParked, parkedByID                                                      string
	request, takeRequest, answerRequest, requestState                           string
	check, unnamed, backlog                                                     string
}

// failedColumns are the columns listFailed and failedByID return, in scanFailed's order.
const failedColumns = `id, reason, detail, coalesce(event_id, ''), coalesce(aggregate_type, ''),
	coalesce(aggregate_id, ''), coalesce(aggregate_version, 0), coalesce(event_type, ''),
	coalesce(schema_version, 0), commit_lsn::text, coalesce(backfill, false), full_state,
	coalesce(payload, ''::bytea), coalesce(headers, '{}'::jsonb), coalesce(received_fingerprint, ''::bytea),
	attempts, first_failed_at, last_failed_at`

// parkedColumns are the columns listParked and parkedByID return, in scanParked's order.
const parkedColumns = `p.event_id, p.aggregate_type, p.aggregate_id, p.aggregate_version, p.event_type,
	p.schema_version, p.commit_lsn::text, p.backfill, p.payload, p.headers, p.parked_at,
	coalesce(a.applied_version, 0)`

// parkedFrom joins each parked event to its aggregate's state.
const parkedFrom = ` FROM {schema}.parked p LEFT JOIN {schema}.aggregate a ON a.consumer = p.consumer
	AND a.aggregate_type = p.aggregate_type AND a.aggregate_id = p.aggregate_id`

func newQueries(schema string) queries {
	q := queries{
		// A new inbox row, or a duplicate, ends the event's count of failed attempts.
		insertInbox: `WITH cleared AS (DELETE FROM {schema}.attempts WHERE consumer = $1 AND event_id = $2)
			INSERT INTO {schema}.inbox (consumer, event_id, fingerprint, aggregate_type, aggregate_id, aggregate_version, status)
			VALUES ($1, $2, $3, $4, $5, $6, 'applied') ON CONFLICT (consumer, event_id) DO NOTHING`,
		inboxEntry: `SELECT fingerprint FROM {schema}.inbox WHERE consumer = $1 AND event_id = $2`,
		setStatus:  `UPDATE {schema}.inbox SET status = $3 WHERE consumer = $1 AND event_id = $2`,
		markApplied: `WITH cleared AS (DELETE FROM {schema}.attempts WHERE consumer = $1 AND event_id = $2)
			UPDATE {schema}.inbox SET status = 'applied' WHERE consumer = $1 AND event_id = $2`,
		deleteInbox: `DELETE FROM {schema}.inbox WHERE consumer = $1 AND event_id = $2`,
		insertSkipped: `INSERT INTO {schema}.inbox (consumer, event_id, fingerprint, aggregate_type, aggregate_id, aggregate_version, status)
			VALUES ($1, $2, $3, $4, $5, $6, 'skipped') ON CONFLICT (consumer, event_id) DO NOTHING`,

		ensureAggregate: `INSERT INTO {schema}.aggregate (consumer, aggregate_type, aggregate_id) VALUES ($1, $2, $3)
			ON CONFLICT (consumer, aggregate_type, aggregate_id) DO NOTHING`,
		lockAggregate: `SELECT applied_version, baseline_version FROM {schema}.aggregate
			WHERE consumer = $1 AND aggregate_type = $2 AND aggregate_id = $3 FOR UPDATE`,
		setApplied: `UPDATE {schema}.aggregate SET applied_version = $4, updated_at = now()
			WHERE consumer = $1 AND aggregate_type = $2 AND aggregate_id = $3`,
		state: `SELECT applied_version, baseline_version FROM {schema}.aggregate
			WHERE consumer = $1 AND aggregate_type = $2 AND aggregate_id = $3`,

		park: `INSERT INTO {schema}.parked (consumer, event_id, aggregate_type, aggregate_id, aggregate_version,
			event_type, schema_version, commit_lsn, backfill, payload, headers)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8::text::pg_lsn, $9, $10, $11)`,
		takeParked: `DELETE FROM {schema}.parked WHERE consumer = $1 AND event_id = (
				SELECT event_id FROM {schema}.parked
				WHERE consumer = $1 AND aggregate_type = $2 AND aggregate_id = $3 AND aggregate_version = $4
				ORDER BY parked_at, event_id LIMIT 1)
			RETURNING event_id, aggregate_version, event_type, schema_version, commit_lsn::text, backfill, payload, headers`,
		dropStaleParked: `WITH gone AS (
				DELETE FROM {schema}.parked
				WHERE consumer = $1 AND aggregate_type = $2 AND aggregate_id = $3 AND aggregate_version <= $4
				RETURNING event_id),
			cleared AS (DELETE FROM {schema}.attempts a USING gone WHERE a.consumer = $1 AND a.event_id = gone.event_id)
			UPDATE {schema}.inbox i SET status = 'stale' FROM gone WHERE i.consumer = $1 AND i.event_id = gone.event_id`,

		// A failure recorded again reopens a resolved row.
		fail: `INSERT INTO {schema}.failed (consumer, event_id, reason, detail, aggregate_type, aggregate_id,
			aggregate_version, event_type, schema_version, commit_lsn, backfill, full_state, stored_fingerprint,
			received_fingerprint, payload, headers, attempts)
			VALUES ($1, NULLIF($2, ''), $3, $4, NULLIF($5, ''), NULLIF($6, ''), $7, $8, $9, $10::text::pg_lsn, $11,
				$12, $13, $14, $15, $16, $17)
			ON CONFLICT (consumer, event_id, reason, received_fingerprint) DO UPDATE
			SET attempts = {schema}.failed.attempts + EXCLUDED.attempts, last_failed_at = now(),
				detail = EXCLUDED.detail, resolved_at = NULL, resolution = NULL, note = NULL`,
		repair: `UPDATE {schema}.aggregate
			SET applied_version = $5, baseline_version = $5, updated_at = now()
			WHERE consumer = $1 AND aggregate_type = $2 AND aggregate_id = $3
			  AND applied_version = $4 AND applied_version < $5`,
		prune: `DELETE FROM {schema}.inbox i USING {schema}.aggregate a
			WHERE i.consumer = $1 AND i.received_at < $2 AND i.status IN ('applied', 'stale', 'skipped')
			  AND a.consumer = i.consumer AND a.aggregate_type = i.aggregate_type AND a.aggregate_id = i.aggregate_id
			  AND i.aggregate_version <= a.applied_version`,

		// Attempts of events that stopped coming (a queue's TTL, a purge) are left behind otherwise.
		pruneAttempts: `DELETE FROM {schema}.attempts WHERE consumer = $1 AND last_failed_at < $2`,
		// Answered repair requests are history; an open one (not taken, or taken and not answered) stays.
		pruneRequests: `DELETE FROM {schema}.requests WHERE consumer = $1 AND done_at < $2`,
		// Failures retried or resolved are history too; an open one is work and stays.
		pruneFailed: `DELETE FROM {schema}.failed WHERE consumer = $1 AND resolved_at < $2`,

		countAttempt: `INSERT INTO {schema}.attempts AS a (consumer, event_id, attempts, last_error) VALUES ($1, $2, 1, $3)
			ON CONFLICT (consumer, event_id) DO UPDATE
			SET attempts = a.attempts + 1, last_error = EXCLUDED.last_error, last_failed_at = now()
			RETURNING attempts`,
		attempts:      `SELECT coalesce((SELECT attempts FROM {schema}.attempts WHERE consumer = $1 AND event_id = $2), 0)`,
		clearAttempts: `DELETE FROM {schema}.attempts WHERE consumer = $1 AND event_id = $2`,

		listFailed: `SELECT ` + failedColumns + ` FROM {schema}.failed
			WHERE consumer = $1 AND resolved_at IS NULL ORDER BY id LIMIT $2`,
		failedByID: `SELECT ` + failedColumns + ` FROM {schema}.failed
			WHERE consumer = $1 AND id = $2 AND resolved_at IS NULL`,
		resolveFailed: `UPDATE {schema}.failed SET resolved_at = now(), resolution = $3, note = $4
			WHERE consumer = $1 AND id = $2 AND resolved_at IS NULL`,
		failedAgain: `UPDATE {schema}.failed SET attempts = attempts + 1, last_failed_at = now(), detail = $3
			WHERE consumer = $1 AND id = $2`,

		listParked: `SELECT ` + parkedColumns + parkedFrom + ` WHERE p.consumer = $1
			ORDER BY p.parked_at, p.event_id LIMIT $2`,
		parkedByID: `SELECT ` + parkedColumns + parkedFrom + ` WHERE p.consumer = $1 AND p.event_id = $2`,

		request: `INSERT INTO {schema}.requests (consumer, action, kind, target, note) VALUES ($1, $2, $3, $4, $5)
			RETURNING id`,
		takeRequest: `UPDATE {schema}.requests SET taken_at = now() WHERE id = (
				SELECT id FROM {schema}.requests WHERE consumer = $1 AND taken_at IS NULL
				ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)
			RETURNING id, action, kind, target, note`,
		answerRequest: `UPDATE {schema}.requests SET done_at = now(), outcome = $3, error = NULLIF($4, '')
			WHERE consumer = $1 AND id = $2`,
		requestState: `SELECT taken_at IS NOT NULL, done_at IS NOT NULL, coalesce(outcome, ''), coalesce(error, '')
			FROM {schema}.requests WHERE consumer = $1 AND id = $2`,

		// check counts the columns this version needs; $1 is the schema name as it is (not quoted).
		check: `SELECT count(*) FROM information_schema.columns WHERE table_schema = $1
			AND (table_name, column_name) IN (('inbox', 'consumer'), ('aggregate', 'consumer'),
				('parked', 'consumer'), ('failed', 'consumer'), ('failed', 'resolved_at'), ('attempts', 'consumer'),
				('requests', 'consumer'))`,
		backlog: `SELECT
			(SELECT count(*) FROM {schema}.parked WHERE consumer = $1),
			(SELECT coalesce(extract(epoch FROM now() - min(parked_at)), 0)::float8 FROM {schema}.parked WHERE consumer = $1),
			(SELECT count(*) FROM {schema}.failed WHERE consumer = $1 AND resolved_at IS NULL)`,
		unnamed: `SELECT EXISTS (SELECT 1 FROM {schema}.aggregate WHERE consumer = '')
			OR EXISTS (SELECT 1 FROM {schema}.inbox WHERE consumer = '')`,
	}
	for _, s := range []*string{&q.insertInbox, &q.inboxEntry, &q.setStatus, &q.markApplied, &q.deleteInbox,
		&q.insertSkipped, &q.ensureAggregate, &q.lockAggregate, &q.setApplied, &q.state, &q.park, &q.takeParked,
		&q.dropStaleParked, &q.fail, &q.repair, &q.prune, &q.pruneAttempts, &q.pruneRequests, &q.pruneFailed, &q.countAttempt, &q.attempts, &q.clearAttempts,
		&q.listFailed, &q.failedByID, &q.resolveFailed, &q.failedAgain, &q.listParked, &q.parkedByID,
		&q.request, &q.takeRequest, &q.answerRequest, &q.requestState, &q.unnamed, &q.backlog} {
		*s = inSchema(*s, schema)
	}
	return q
}

// checkColumns is how many rows queries.check finds in an up-to-date schema.
const checkColumns = 7
