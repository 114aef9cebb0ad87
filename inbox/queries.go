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
	listRequests, cancelRequest, expireRequest, inboxStatus                     string
	skip, skippedAt, arrivedInGap, pruneSkipped                                 string
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
		// and so are cancelled ones and expired ones no Runner took.
		pruneRequests: `DELETE FROM {schema}.requests WHERE consumer = $1
			AND (done_at < $2 OR cancelled_at < $2 OR (taken_at IS NULL AND expires_at < $2))`,
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

		// $6 is who filed it as the operator's tool knows it ('' when it does not); $7 milliseconds until it
		// expires (0: never).
		request: `INSERT INTO {schema}.requests (consumer, action, kind, target, note, filed_by, expires_at, premise_applied)
			VALUES ($1, $2, $3, $4, $5, ` + filedBy("$6::text") + `,
				CASE WHEN $7::bigint > 0 THEN now() + $7::bigint * interval '1 millisecond' END, $8)
			RETURNING id`,
		// A cancelled or expired request is never taken.
		takeRequest: `UPDATE {schema}.requests SET taken_at = now() WHERE id = (
				SELECT id FROM {schema}.requests WHERE consumer = $1 AND taken_at IS NULL AND cancelled_at IS NULL
				  AND (expires_at IS NULL OR expires_at > now())
				ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)
			RETURNING id, action, kind, target, note, requested_at, premise_applied`,
		answerRequest: `UPDATE {schema}.requests SET done_at = now(), outcome = $3, error = NULLIF($4, '')
			WHERE consumer = $1 AND id = $2`,
		requestState: `SELECT taken_at IS NOT NULL, done_at IS NOT NULL, ` + requestStateSQL + `,
			coalesce(outcome, ''), coalesce(error, '') FROM {schema}.requests WHERE consumer = $1 AND id = $2`,
		listRequests: `SELECT id, action, kind, target, note, requested_at, coalesce(filed_by, ''), expires_at,
			` + requestStateSQL + `, coalesce(outcome, ''), coalesce(error, ''), coalesce(cancelled_by, '')
			FROM {schema}.requests WHERE consumer = $1 ORDER BY id DESC LIMIT $2`,
		// Only a request no Runner took can be cancelled; an expired one may be (it stays not carried out).
		cancelRequest: `UPDATE {schema}.requests SET cancelled_at = now(), cancelled_by = ` + filedBy("$3::text") + `
			WHERE consumer = $1 AND id = $2 AND taken_at IS NULL AND cancelled_at IS NULL`,
		expireRequest: `UPDATE {schema}.requests SET expires_at = now()
			WHERE consumer = $1 AND id = $2 AND taken_at IS NULL AND cancelled_at IS NULL
			  AND (expires_at IS NULL OR expires_at > now())`,
		inboxStatus: `SELECT status FROM {schema}.inbox WHERE consumer = $1 AND event_id = $2`,

		skip: `INSERT INTO {schema}.skipped (consumer, aggregate_type, aggregate_id, from_version, to_version,
				event_id, request_id, note)
			VALUES ($1, $2, $3, $4, $5, $6, NULLIF($7, 0), $8)
			ON CONFLICT (consumer, aggregate_type, aggregate_id, from_version) DO NOTHING`,
		skippedAt: `SELECT from_version, to_version, event_id, coalesce(request_id, 0), note, skipped_at
			FROM {schema}.skipped WHERE consumer = $1 AND aggregate_type = $2 AND aggregate_id = $3
			  AND to_version >= $4 AND from_version <= $4
			ORDER BY from_version DESC LIMIT 1`,
		// The lowest version between $4 and $5 (exclusive) of the aggregate that arrived after $6: parked
		// (an inbox row) or failed (an open record, whose id is returned).
		arrivedInGap: `SELECT v, how, failed_id FROM (
				SELECT aggregate_version AS v, status AS how, 0::bigint AS failed_id FROM {schema}.inbox
				WHERE consumer = $1 AND aggregate_type = $2 AND aggregate_id = $3
				  AND aggregate_version > $4 AND aggregate_version < $5 AND received_at > $6
				UNION ALL
				SELECT aggregate_version, 'failed', id FROM {schema}.failed
				WHERE consumer = $1 AND aggregate_type = $2 AND aggregate_id = $3 AND resolved_at IS NULL
				  AND aggregate_version > $4 AND aggregate_version < $5 AND first_failed_at > $6) arrived
			ORDER BY v LIMIT 1`,
		pruneSkipped: `DELETE FROM {schema}.skipped WHERE consumer = $1 AND skipped_at < $2`,

		// check counts the columns this version needs; $1 is the schema name as it is (not quoted).
		check: `SELECT count(*) FROM information_schema.columns WHERE table_schema = $1
			AND (table_name, column_name) IN (('inbox', 'consumer'), ('aggregate', 'consumer'),
				('parked', 'consumer'), ('failed', 'consumer'), ('failed', 'resolved_at'), ('attempts', 'consumer'),
				('requests', 'consumer'), ('requests', 'expires_at'), ('requests', 'premise_applied'),
				('skipped', 'consumer'))`,
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
		&q.request, &q.takeRequest, &q.answerRequest, &q.requestState, &q.unnamed, &q.backlog,
		&q.listRequests, &q.cancelRequest, &q.expireRequest, &q.inboxStatus, &q.skip, &q.skippedAt,
		&q.arrivedInGap, &q.pruneSkipped} {
		*s = inSchema(*s, schema)
	}
	return q
}

// checkColumns is how many rows queries.check finds in an up-to-date schema.
const checkColumns = 10

// requestStateSQL names where a row of the requests table stands: waiting, taken, done, cancelled or
// expired.
const requestStateSQL = `CASE WHEN cancelled_at IS NOT NULL THEN 'cancelled' WHEN done_at IS NOT NULL THEN 'done'
	WHEN taken_at IS NOT NULL THEN 'taken' WHEN expires_at <= now() THEN 'expired' ELSE 'waiting' END`

// filedBy is the SQL naming who filed or cancelled a request: the operator's name given in param (the
// tool's user, ” when it knows none) and the PostgreSQL role of the session.
func filedBy(param string) string {
	return `CASE WHEN ` + param + ` = '' THEN session_user::text ELSE ` + param + ` || ' (role ' || session_user || ')' END`
}
