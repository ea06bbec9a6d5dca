package dialect

import "strconv"

// The probe's SQL (groupstore.Probe, PostgreSQL only): the fit of an added
// message read from the group's messages (fitsOf), and the probe summary
// of script 000008 that lets the Add read it from the group's row instead
// (addSummary, summarize).

// SummaryCap bounds the values a group's probe summary keeps: a group of
// more unreleased messages has none (see AddSummary).
const SummaryCap = 256

// The probe values of the statement's own message, and the probe's keys.
const (
	ownUnique    = `CAST(:unique AS BIGINT)`
	ownSame      = `CAST(:same AS BIGINT)`
	ownUniqueKey = `CAST(:unique_key AS TEXT)`
	ownSameKey   = `CAST(:same_key AS TEXT)`
)

// addSummary returns PostgreSQL's GroupSQL.AddSummary: inPlace, which
// also keeps the group row's probe summary (script 000008) and reads the
// fit from it. The summary is the values under :probe_keys' keys of the
// group's unreleased messages: PROBE_UNIQUE those under the unique key
// (NULL where one is not a number), PROBE_SAME the one all share under the
// same key, NULL if they differ. It is true for the group as it was at
// VERSION PROBE_VERSION. The update reads the row's latest version, so
// where the summary is true for it (kept), the message's values are
// appended and the fit is exact, whatever committed while the update
// waited: the message's own number is the last of PROBE_UNIQUE, and
// PROBE_SAME stays its size only if every other message has that size
// too. Where it is not (another statement changed the group, or the keys
// differ), the summary is dropped and FITS is NULL: Summarize builds it
// again. A new group's summary is its one message's values. The statement
// reads no message: every subquery in it costs its start-up at each
// execution, run or not (measured: about 15 µs each).
func addSummary(due bool) string {
	kept := `PROBE_VERSION = VERSION AND PROBE_KEYS = :probe_keys AND MESSAGE_COUNT < ` + strconv.Itoa(SummaryCap)
	return inPlace(due, inPlaceParts{
		set: `, PROBE_VERSION = CASE WHEN ` + kept + ` THEN VERSION + 1 END, ` +
			`PROBE_UNIQUE = CASE WHEN ` + kept + ` THEN PROBE_UNIQUE || ` + ownUnique + ` END, ` +
			`PROBE_SAME = CASE WHEN ` + kept + ` AND (cardinality(PROBE_UNIQUE) = 0 OR PROBE_SAME = ` + ownSame + `) THEN ` + ownSame + ` END`,
		returning: `, CASE WHEN PROBE_VERSION = VERSION THEN CASE WHEN (` + ownUnique +
			` = ANY(PROBE_UNIQUE[1 : cardinality(PROBE_UNIQUE) - 1])) IS FALSE AND PROBE_SAME IS NOT NULL THEN 1 ELSE 0 END END AS FITS`,
		cols:    `, PROBE_VERSION, PROBE_KEYS, PROBE_UNIQUE, PROBE_SAME`,
		vals:    `, 1, :probe_keys, ARRAY[` + ownUnique + `], ` + ownSame,
		created: `, 1 AS FITS`,
		fits:    `, x.FITS`,
	})
}

// summarize is PostgreSQL's GroupSQL.Summarize: the group's summary built
// from its unreleased messages, the message itself among them, in the
// statement's snapshot, if the group is still at :version. The message
// fits if its number is there once and no other is NULL, and PROBE_SAME
// is its size.
func summarize() string {
	unreleased := func(col string) string {
		return `SELECT ` + col + ` FROM {prefix}GROUP_MESSAGE o ` + probed(ownUniqueKey, ownSameKey) +
			` WHERE o.GROUP_KEY = :group_key AND o.REGION = :region AND o.RELEASED = 0`
	}
	return `UPDATE {prefix}GROUP SET PROBE_KEYS = :probe_keys, PROBE_VERSION = VERSION, ` +
		`PROBE_UNIQUE = ARRAY(` + unreleased(probeNumber(`v.u`)) + `), ` +
		`PROBE_SAME = CASE WHEN NOT EXISTS (` + unreleased(`1`) + ` AND ` + sameMisfit(ownSame) + `) THEN ` + ownSame + ` END ` +
		`WHERE GROUP_KEY = :group_key AND REGION = :region AND VERSION = :version AND MESSAGE_COUNT <= ` + strconv.Itoa(SummaryCap) +
		` RETURNING CASE WHEN array_position(PROBE_UNIQUE, NULL) IS NULL AND cardinality(array_positions(PROBE_UNIQUE, ` + ownUnique +
		`)) = 1 AND PROBE_SAME IS NOT NULL THEN 1 ELSE 0 END`
}

// fitsOf is the FITS of a probe (see addMessageProbed): 1 if version,
// the group's VERSION after the statement, is its VERSION in the
// statement's snapshot plus added, and none of the group's other
// unreleased messages in that snapshot misfits, else 0.
func fitsOf(version, groupKey, added, uniqueKey, unique, sameKey, same, messageKey string) string {
	return `CASE WHEN ` + version + ` = COALESCE((SELECT s.VERSION FROM {prefix}GROUP s WHERE s.GROUP_KEY = ` + groupKey +
		` AND s.REGION = :region), 0) + ` + added +
		` AND NOT EXISTS (SELECT 1 FROM {prefix}GROUP_MESSAGE o ` + probed(uniqueKey, sameKey) +
		` WHERE o.GROUP_KEY = ` + groupKey + ` AND o.REGION = :region ` +
		`AND o.RELEASED = 0 AND o.MESSAGE_KEY <> ` + messageKey + ` AND (` + misfitOf(uniqueKey, unique, sameKey, same) + `)) THEN 1 ELSE 0 END`
}

// fitsOfParams is fitsOf for the one message of the statement's
// parameters.
func fitsOfParams(version, added string) string {
	return fitsOf(version, `:group_key`, added, ownUniqueKey, ownUnique, ownSameKey, ownSame, `:message_key`)
}

// probed joins each message o of a probe with v, its metadata values under
// the key expressions uniqueKey (v.u) and sameKey (v.s). The metadata is
// parsed once per message: OFFSET 0 keeps the planner from copying the
// cast into each use (up to five parses a message; a probe of 100 000
// rows in psql took 2.6 times as long that way).
func probed(uniqueKey, sameKey string) string {
	return `CROSS JOIN LATERAL (SELECT x.j ->> ` + uniqueKey + ` AS u, x.j ->> ` + sameKey + ` AS s ` +
		`FROM (SELECT CAST(o.METADATA AS JSONB) AS j OFFSET 0) x) v`
}

// misfitOf is the condition on v (see probed) of a message that does not
// fit a probe: a number under uniqueKey that is absent, not a number or
// equal to unique, or one under sameKey that differs from same (absent
// where same is 0). Empty keys probe nothing.
func misfitOf(uniqueKey, unique, sameKey, same string) string {
	return `(` + uniqueKey + ` <> '' AND COALESCE(` + probeNumber(`v.u`) + ` = ` + unique + `, TRUE)) OR ` +
		`(` + sameKey + ` <> '' AND ` + sameMisfit(same) + `)`
}

// sameMisfit is misfitOf's condition on v.s, the value under the same
// key.
func sameMisfit(same string) string {
	return `CASE WHEN v.s IS NULL THEN ` + same + ` <> 0 ELSE COALESCE(` + probeNumber(`v.s`) + ` <> ` + same + `, TRUE) END`
}

// probeNumber is the text expression x as a BIGINT, NULL if it is not a
// decimal number of at most 18 digits (so that no cast can fail).
func probeNumber(x string) string {
	return `(CASE WHEN ` + x + ` ~ '^[+]?[0-9]{1,18}$' THEN CAST(` + x + ` AS BIGINT) END)`
}
