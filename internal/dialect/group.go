package dialect

import (
	"strconv"
	"strings"
)

// The parameters of the message-group statements (the group tables are
// {prefix}GROUP and {prefix}GROUP_MESSAGE).
const (
	GroupKey       = "group_key"       // the name-based UUID of the correlation key
	CorrelationKey = "correlation_key" // the correlation key itself
	GroupID        = "group_id"        // a new group's ID
	MessageKey     = "message_key"     // the name-based UUID of a message's UUID
	MessageID      = "message_id"      // the message's UUID itself
	Position       = "position"        // the message's position in its group
	Metadata       = "metadata"        // the message's metadata as JSON, or NULL
	Payload        = "payload"         // the message's payload
	Timeout        = "timeout"         // microseconds from now to the group's due time
	Version        = "version"         // the version a change expects
	Sequence       = "sequence"        // the last released sequence number
	Limit          = "limit"           // the most groups a claim returns
	Lease          = "lease"           // the microseconds a claim lasts
	UniqueKey      = "unique_key"      // a probe's metadata key no other message may share a value under
	Unique         = "unique"          // its value
	SameKey        = "same_key"        // a probe's metadata key every other message must share a value under
	Same           = "same"            // its value, 0 for absent
	ProbeKeys      = "probe_keys"      // UniqueKey and SameKey as one text (see AddSummary)
	Rows           = "rows"            // AddBatch's calls: a JSON array of objects (see AddBatch)
	// Region, Retention and Batch are the lock statements'.
)

// GroupParams are the parameters of the group statements.
var GroupParams = []string{GroupKey, Region, CorrelationKey, GroupID, MessageKey, MessageID, Position, Metadata,
	Payload, Timeout, Version, Sequence, Limit, Lease, Retention, Batch, UniqueKey, Unique, SameKey, Same, ProbeKeys, Rows}

// GroupColumns are the columns of the group table that Add reads.
const GroupColumns = `GROUP_ID, COMPLETE, LAST_RELEASED_SEQUENCE, RELEASES, MESSAGE_COUNT, LAST_POSITION, VERSION, CREATED_DATE`

// GroupSQL are a dialect's statements of the message-group tables that
// differ between dialects.
type GroupSQL struct {
	// Upsert creates the group of :group_key unless it exists and, unless
	// LockGroup is set, returns its row's GroupColumns, locked for the
	// transaction. LockGroup reads them, locking the row, where the
	// upsert returns nothing (MySQL).
	Upsert, LockGroup string
	// InsertMessage adds the row of :message_key to the group unless the
	// group has it; it affects no row then.
	InsertMessage string
	// AddMessage, where set (PostgreSQL), is the whole of an Add in one
	// statement, without and with a timeout (:timeout): it locks the group
	// row, inserts the message unless the group has it or is complete,
	// creates or updates the group and returns its GroupColumns after the
	// call and ADDED, 1 if the message was inserted, else 0.
	AddMessage [2]string
	// AddProbe, where set (PostgreSQL), is AddMessage that also returns
	// FITS, 1 if the group's other unreleased messages fit the probe
	// (:unique_key, :unique, :same_key, :same; see groupstore.Probe) as
	// they were when the group row's lock was granted, else 0.
	AddProbe [2]string
	// AddInPlace, where set (PostgreSQL), is AddMessage (AddInPlace[0])
	// and AddProbe (AddInPlace[1]), each without and with a timeout, for
	// the usual case, in fewer writes: it updates an open group's row in
	// place, or creates the group where the statement's snapshot has none,
	// and inserts the message, with no lock taken ahead of the update and
	// no speculative insert. It returns no row where the group is complete
	// (or was removed meanwhile), and fails with a unique violation
	// (23505) where the group has the message or another statement
	// created the group meanwhile: outside a transaction (which the error
	// would abort), AddMessage or AddProbe then does the Add. ADDED is
	// always 1.
	AddInPlace [2][2]string
	// AddSummary, where set (PostgreSQL), is AddInPlace with the probe,
	// without and with a timeout, for a message whose own values under the
	// probe's keys are :unique and :same, on a group table with the
	// columns of script 000008 (undefined_column, 42703, without them): it
	// reads the fit from the probe summary in the group's row, the values
	// of its unreleased messages under the keys :probe_keys names, and
	// appends the message's (see addSummary). FITS is NULL where the row
	// has no summary true for it: the caller then probes with Summarize,
	// or with ProbeAfter for a group of more than SummaryCap unreleased
	// messages. Its outcomes are AddInPlace's.
	AddSummary [2]string
	// Summarize, where set (PostgreSQL), builds the probe summary of the
	// group :group_key, if it is still at :version (after an AddSummary
	// that returned VERSION :version and FITS NULL) and holds at most
	// SummaryCap unreleased messages, and returns FITS for the message of
	// :unique and :same that the Add added. No row: not at :version, or
	// too large.
	Summarize string
	// ProbeAfter, where set (PostgreSQL), is FITS of the message that an
	// Add added to the group :group_key, from its unreleased messages,
	// 1 only if the group is still at :version.
	ProbeAfter string
	// AddBatch, where set (PostgreSQL), is AddMessage for several
	// messages of distinct groups in one statement, without and with the
	// probes of AddProbe, and with them keeping the probe summaries of
	// script 000008 (see AddSummary) of the rows with a "probe_keys".
	// :rows is a JSON array of one object per message, {"n", "group_key",
	// "correlation_key", "group_id", "message_key", "message_id",
	// "metadata", "payload" (base64), "due" and "timeout" (true and
	// microseconds for a timeout), and for the probe "unique_key",
	// "unique", "same_key", "same", "probe_keys" (AddSummary's
	// :probe_keys, or absent)}; it
	// returns N, GroupColumns, ADDED (and FITS) per message, in the order
	// of n. It locks the existing groups' rows in the order of their keys
	// and creates the new ones in that order too, so that two such
	// statements cannot deadlock.
	AddBatch [3]string
	// LockRow locks the row of the group :group_key for the transaction,
	// if there is one: a SELECT ... FOR UPDATE, or on SQLite a write that
	// changes nothing, which takes the database's write lock.
	LockRow string
	// LockGet, where set (PostgreSQL), is a read of the group :group_key
	// with its unreleased messages (SelectGroup's columns, in its order)
	// that also locks the group row for the
	// transaction, and returns as its last column LOCKED_VERSION, the
	// VERSION of the row's latest version. The rest reads the snapshot the
	// statement started with, which misses a change that committed while
	// the lock waited: where LOCKED_VERSION differs from VERSION, the
	// caller reads the group again (every change of a group's messages
	// changes its VERSION in the same transaction). No row: no group.
	LockGet string
	// UpdateWith reports data-modifying WITH clauses (PostgreSQL): an
	// update of a group that releases messages is one statement.
	UpdateWith bool
	// ClaimDue claims up to :limit due groups for :lease in one statement
	// and returns CORRELATION_KEY, GROUP_KEY, VERSION, DUE_AT of each;
	// where it is "" the store selects due groups and claims each with a
	// conditional update.
	ClaimDue string
	// SweepMessages deletes at most :batch message rows of finished
	// groups (Finished), and SweepGroups at most :batch finished groups
	// left without message rows. Where SelectFinished is set (MySQL), it
	// selects up to :batch finished groups' keys, and the two delete
	// those of the groups in their {list}.
	SweepMessages, SweepGroups, SelectFinished string
}

// finished is the clean-up's condition on a group (alias g) that nothing
// needs: it is complete, holds no unreleased message, has no due time (no
// timeout, no scheduled removal) and has not changed for :retention. A
// group that changed exactly :retention ago is finished, so that a
// retention of 0 takes every finished group, also one that changed within
// the clock's last tick (SQLite's clock counts milliseconds).
func finished(g string) string {
	return g + `.REGION = :region AND ` + g + `.COMPLETE = 1 AND ` + g + `.MESSAGE_COUNT = 0 AND ` + g +
		`.DUE_AT IS NULL AND ` + g + `.UPDATED_DATE <= {now-:retention}`
}

// The upserts of the dialects with ON CONFLICT (PostgreSQL, SQLite).
const (
	insertGroup = `INSERT INTO {prefix}GROUP (GROUP_KEY, REGION, CORRELATION_KEY, GROUP_ID, COMPLETE, LAST_RELEASED_SEQUENCE, ` +
		`RELEASES, MESSAGE_COUNT, LAST_POSITION, VERSION, CREATED_DATE, UPDATED_DATE) ` +
		`VALUES (:group_key, :region, :correlation_key, :group_id, 0, 0, 0, 0, 0, 0, {now}, {now}) `
	insertMessage = `INSERT INTO {prefix}GROUP_MESSAGE (GROUP_KEY, REGION, MESSAGE_KEY, MESSAGE_ID, POSITION, RELEASED, ` +
		`METADATA, PAYLOAD, CREATED_DATE) VALUES (:group_key, :region, :message_key, :message_id, :position, 0, ` +
		`:metadata, :payload, {now}) `

	upsertGroupReturning = insertGroup + `ON CONFLICT (GROUP_KEY, REGION) DO UPDATE SET GROUP_KEY = excluded.GROUP_KEY ` +
		`RETURNING ` + GroupColumns
	insertMessageUnlessThere = insertMessage + `ON CONFLICT (GROUP_KEY, REGION, MESSAGE_KEY) DO NOTHING`
)

// addMessage returns PostgreSQL's one-statement Add (GroupSQL.AddMessage),
// with a timeout if due. l locks the existing group row; its condition is
// checked again on the row's latest version once the lock is granted, so
// m sees whether the group is complete as it is now, and a message whose
// row exists (or is being inserted) adds nothing. g creates the group or
// counts the message in it: an update of the row l locked, in the same
// statement, of which only g writes. A group that gained the message falls
// due :timeout from now, its claim ended.
func addMessage(due bool) string { return addMessageProbed(due, false) }

// addMessageProbed is addMessage, with probe also returning FITS
// (GroupSQL.AddProbe). The statement reads the message table in the
// snapshot it started with, which misses what committed while l waited
// for the group row (l alone reads the row's latest version): the probe
// holds only if the group's VERSION in that snapshot, plus the message
// added, is the VERSION g returns, that is, if nothing changed the group
// meanwhile (every change of a group's messages changes its VERSION in the
// same transaction). A metadata value is compared as a number only where
// it is one (the CASE), so that no cast can fail.
func addMessageProbed(due, probe bool) string {
	const added = `(SELECT COUNT(*) FROM m)`
	dueCol, dueVal, dueSet := "", "", ""
	if due {
		dueCol, dueVal = `, DUE_AT`, `, {now+:timeout}`
		dueSet = `, DUE_AT = CASE WHEN excluded.VERSION > 0 THEN {now+:timeout} ELSE t.DUE_AT END, ` +
			`CLAIMED_UNTIL = CASE WHEN excluded.VERSION > 0 THEN NULL ELSE t.CLAIMED_UNTIL END`
	}
	fits := ""
	if probe {
		fits = `, ` + fitsOfParams(`g.VERSION`, added) + ` AS FITS`
	}
	return `WITH l AS (SELECT COMPLETE, LAST_POSITION FROM {prefix}GROUP WHERE GROUP_KEY = :group_key AND REGION = :region FOR UPDATE), ` +
		`m AS (INSERT INTO {prefix}GROUP_MESSAGE (GROUP_KEY, REGION, MESSAGE_KEY, MESSAGE_ID, POSITION, RELEASED, METADATA, PAYLOAD, CREATED_DATE) ` +
		`SELECT :group_key, :region, :message_key, :message_id, COALESCE((SELECT LAST_POSITION FROM l), 0) + 1, 0, :metadata, :payload, {now} ` +
		`WHERE NOT EXISTS (SELECT 1 FROM l WHERE COMPLETE <> 0) ON CONFLICT (GROUP_KEY, REGION, MESSAGE_KEY) DO NOTHING RETURNING 1), ` +
		`g AS (INSERT INTO {prefix}GROUP AS t (GROUP_KEY, REGION, CORRELATION_KEY, GROUP_ID, COMPLETE, LAST_RELEASED_SEQUENCE, ` +
		`RELEASES, MESSAGE_COUNT, LAST_POSITION, VERSION, CREATED_DATE, UPDATED_DATE` + dueCol + `) ` +
		`VALUES (:group_key, :region, :correlation_key, :group_id, 0, 0, 0, ` + added + `, ` + added + `, ` + added + `, {now}, {now}` + dueVal + `) ` +
		`ON CONFLICT (GROUP_KEY, REGION) DO UPDATE SET MESSAGE_COUNT = t.MESSAGE_COUNT + excluded.MESSAGE_COUNT, ` +
		`LAST_POSITION = t.LAST_POSITION + excluded.LAST_POSITION, VERSION = t.VERSION + excluded.VERSION, ` +
		`UPDATED_DATE = CASE WHEN excluded.VERSION > 0 THEN {now} ELSE t.UPDATED_DATE END` + dueSet +
		` RETURNING ` + GroupColumns + `) ` +
		`SELECT ` + GroupColumns + `, ` + added + ` AS ADDED` + fits + ` FROM g`
}

// addInPlace returns PostgreSQL's GroupSQL.AddInPlace (with probe, FITS
// as addMessageProbed returns it).
func addInPlace(due, probe bool) string {
	var p inPlaceParts
	if probe {
		p.fits = `, ` + fitsOfParams(`x.VERSION`, `1`) + ` AS FITS`
	}
	return inPlace(due, p)
}

// inPlaceParts are what a form of inPlace adds: to the update of the
// group's row (set, and to its RETURNING returning), to its creation
// (cols, vals, created) and to the statement's result (fits).
type inPlaceParts struct{ set, returning, cols, vals, created, fits string }

// inPlace is the statement of AddInPlace and AddSummary. g updates the
// group's row unless it is complete: the update waits for the row's lock
// and checks its condition again on the latest version. c creates the
// group where the snapshot has none; a group that another statement
// creates meanwhile makes c fail on the primary key, so that c never adds
// a second group. m inserts the message at the group's new LAST_POSITION;
// one that the group has fails on the primary key.
func inPlace(due bool, p inPlaceParts) string {
	dueSet, dueCol, dueVal := "", "", ""
	if due {
		dueSet, dueCol, dueVal = `, DUE_AT = {now+:timeout}, CLAIMED_UNTIL = NULL`, `, DUE_AT`, `, {now+:timeout}`
	}
	return `WITH g AS (UPDATE {prefix}GROUP SET MESSAGE_COUNT = MESSAGE_COUNT + 1, LAST_POSITION = LAST_POSITION + 1, ` +
		`VERSION = VERSION + 1, UPDATED_DATE = {now}` + dueSet + p.set +
		` WHERE GROUP_KEY = :group_key AND REGION = :region AND COMPLETE = 0 RETURNING ` + GroupColumns + p.returning + `), ` +
		`c AS (INSERT INTO {prefix}GROUP (GROUP_KEY, REGION, CORRELATION_KEY, GROUP_ID, COMPLETE, LAST_RELEASED_SEQUENCE, ` +
		`RELEASES, MESSAGE_COUNT, LAST_POSITION, VERSION, CREATED_DATE, UPDATED_DATE` + dueCol + p.cols + `) ` +
		`SELECT :group_key, :region, :correlation_key, :group_id, 0, 0, 0, 1, 1, 1, {now}, {now}` + dueVal + p.vals +
		` WHERE NOT EXISTS (SELECT 1 FROM {prefix}GROUP WHERE GROUP_KEY = :group_key AND REGION = :region) RETURNING ` +
		GroupColumns + p.created + `), ` +
		`x AS (SELECT * FROM g UNION ALL SELECT * FROM c), ` +
		`m AS (INSERT INTO {prefix}GROUP_MESSAGE (GROUP_KEY, REGION, MESSAGE_KEY, MESSAGE_ID, POSITION, RELEASED, METADATA, PAYLOAD, CREATED_DATE) ` +
		`SELECT :group_key, :region, :message_key, :message_id, x.LAST_POSITION, 0, :metadata, :payload, {now} FROM x) ` +
		`SELECT ` + GroupColumns + `, 1 AS ADDED` + p.fits + ` FROM x`
}

// addBatch returns PostgreSQL's one-statement Add of several messages of
// distinct groups (GroupSQL.AddBatch), with probe also returning FITS. It
// is addMessageProbed with a row of i in place of the parameters: per
// group the same locks, writes and reads, so the same outcomes. l looks
// each group up in a LATERAL subquery, a nested loop in key order whatever
// the statistics say (an IN leaves the join's method to them, and the
// benchmark on a fresh database ran slower with it). With summary (and
// probe) it also keeps the probe summaries of its groups (see addSummary)
// for the rows whose probe_keys is set: a new group's is its message's
// values, a kept one gets them appended, and another is dropped; FITS
// still reads the messages.
func addBatch(probe, summary bool) string {
	probeCols := `, unique_key TEXT, "unique" BIGINT, same_key TEXT, same BIGINT`
	if summary {
		probeCols += `, probe_keys TEXT`
	}
	cols := `n INT, group_key CHAR(36), correlation_key TEXT, group_id CHAR(36), message_key CHAR(36), message_id TEXT, ` +
		`metadata TEXT, payload TEXT, due BOOLEAN, timeout BIGINT`
	fits := ""
	if probe {
		cols += probeCols
		fits = `, ` + fitsOf(`g.VERSION`, `a.group_key`, `a.added`, `a.unique_key`, `a."unique"`, `a.same_key`, `a.same`, `a.message_key`) + ` AS FITS`
	}
	due := `CASE WHEN due THEN {now} + timeout * INTERVAL '1 microsecond' END`
	sumCols, sumVals, sumSet := "", "", ""
	if summary {
		kept := `t.PROBE_VERSION = t.VERSION AND t.PROBE_KEYS = excluded.PROBE_KEYS AND t.MESSAGE_COUNT < ` + strconv.Itoa(SummaryCap)
		sumCols = `, PROBE_VERSION, PROBE_KEYS, PROBE_UNIQUE, PROBE_SAME`
		sumVals = `, CASE WHEN probe_keys IS NOT NULL THEN added END, probe_keys, ARRAY["unique"], same`
		sumSet = `, PROBE_KEYS = excluded.PROBE_KEYS, PROBE_VERSION = CASE WHEN ` + kept + ` THEN t.VERSION + excluded.VERSION END, ` +
			`PROBE_UNIQUE = CASE WHEN ` + kept + ` THEN CASE WHEN excluded.VERSION > 0 THEN t.PROBE_UNIQUE || excluded.PROBE_UNIQUE ` +
			`ELSE t.PROBE_UNIQUE END END, ` +
			`PROBE_SAME = CASE WHEN ` + kept + ` THEN CASE WHEN excluded.VERSION = 0 THEN t.PROBE_SAME ` +
			`WHEN cardinality(t.PROBE_UNIQUE) = 0 OR t.PROBE_SAME = excluded.PROBE_SAME THEN excluded.PROBE_SAME END END`
	}
	fresh := `excluded.VERSION > 0 AND excluded.DUE_AT IS NOT NULL`
	return `WITH i AS (SELECT * FROM json_to_recordset(CAST(:rows AS JSON)) AS r(` + cols + `)), ` +
		`l AS (SELECT r.GROUP_KEY, r.COMPLETE, r.LAST_POSITION FROM (SELECT group_key FROM i ORDER BY group_key) k CROSS JOIN LATERAL ` +
		`(SELECT GROUP_KEY, COMPLETE, LAST_POSITION FROM {prefix}GROUP WHERE GROUP_KEY = k.group_key AND REGION = :region FOR UPDATE) r), ` +
		`m AS (INSERT INTO {prefix}GROUP_MESSAGE (GROUP_KEY, REGION, MESSAGE_KEY, MESSAGE_ID, POSITION, RELEASED, METADATA, PAYLOAD, CREATED_DATE) ` +
		`SELECT i.group_key, :region, i.message_key, i.message_id, COALESCE(l.LAST_POSITION, 0) + 1, 0, i.metadata, decode(i.payload, 'base64'), {now} ` +
		`FROM i LEFT JOIN l ON l.GROUP_KEY = i.group_key WHERE COALESCE(l.COMPLETE, 0) = 0 ` +
		`ON CONFLICT (GROUP_KEY, REGION, MESSAGE_KEY) DO NOTHING RETURNING GROUP_KEY), ` +
		`a AS (SELECT i.*, (SELECT COUNT(*) FROM m WHERE m.GROUP_KEY = i.group_key) AS added FROM i), ` +
		`g AS (INSERT INTO {prefix}GROUP AS t (GROUP_KEY, REGION, CORRELATION_KEY, GROUP_ID, COMPLETE, LAST_RELEASED_SEQUENCE, ` +
		`RELEASES, MESSAGE_COUNT, LAST_POSITION, VERSION, CREATED_DATE, UPDATED_DATE, DUE_AT` + sumCols + `) ` +
		`SELECT group_key, :region, correlation_key, group_id, 0, 0, 0, added, added, added, {now}, {now}, ` + due + sumVals + ` FROM a ORDER BY group_key ` +
		`ON CONFLICT (GROUP_KEY, REGION) DO UPDATE SET MESSAGE_COUNT = t.MESSAGE_COUNT + excluded.MESSAGE_COUNT, ` +
		`LAST_POSITION = t.LAST_POSITION + excluded.LAST_POSITION, VERSION = t.VERSION + excluded.VERSION, ` +
		`UPDATED_DATE = CASE WHEN excluded.VERSION > 0 THEN {now} ELSE t.UPDATED_DATE END, ` +
		`DUE_AT = CASE WHEN ` + fresh + ` THEN excluded.DUE_AT ELSE t.DUE_AT END, ` +
		`CLAIMED_UNTIL = CASE WHEN ` + fresh + ` THEN NULL ELSE t.CLAIMED_UNTIL END` + sumSet +
		` RETURNING t.GROUP_KEY, ` + GroupColumns + `) ` +
		`SELECT a.n, g.` + strings.ReplaceAll(GroupColumns, ", ", ", g.") + `, a.added` + fits +
		` FROM a JOIN g ON g.GROUP_KEY = a.group_key ORDER BY a.n`
}

// The read of a group with its unreleased messages in their order: one row
// per message, or one with NULL message columns for a group without any.
const (
	groupReadColumns = `g.GROUP_ID, g.COMPLETE, g.LAST_RELEASED_SEQUENCE, g.RELEASES, g.MESSAGE_COUNT, ` +
		`g.VERSION, g.DUE_AT, g.CREATED_DATE, g.UPDATED_DATE, m.MESSAGE_ID, m.METADATA, m.PAYLOAD`
	groupReadJoin = `LEFT JOIN {prefix}GROUP_MESSAGE m ON m.GROUP_KEY = g.GROUP_KEY AND m.REGION = g.REGION ` +
		`AND m.RELEASED = 0 WHERE g.GROUP_KEY = :group_key AND g.REGION = :region ORDER BY m.POSITION`
	// SelectGroup reads the group :group_key.
	SelectGroup = `SELECT ` + groupReadColumns + ` FROM {prefix}GROUP g ` + groupReadJoin
)

// lockGet is PostgreSQL's GroupSQL.LockGet: l locks the row and reads
// its latest version; g and m are read in the statement's snapshot.
const lockGet = `WITH l AS (SELECT VERSION FROM {prefix}GROUP WHERE GROUP_KEY = :group_key AND REGION = :region FOR UPDATE) ` +
	`SELECT ` + groupReadColumns + `, l.VERSION AS LOCKED_VERSION FROM l CROSS JOIN {prefix}GROUP g ` + groupReadJoin

// lockRowForUpdate is GroupSQL.LockRow where rows lock (PostgreSQL, MySQL).
const lockRowForUpdate = `SELECT VERSION FROM {prefix}GROUP WHERE GROUP_KEY = :group_key AND REGION = :region FOR UPDATE`

// DueGroup is the condition on a group that is due and not claimed.
const DueGroup = `DUE_AT <= {now} AND (CLAIMED_UNTIL IS NULL OR CLAIMED_UNTIL <= {now})`
