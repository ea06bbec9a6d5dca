package sqlstore

import (
	"github.com/lockreg/lockreg/groupstore"
	"github.com/lockreg/lockreg/internal/dialect"
)

// The group statements common to all dialects, in the templating rule of
// package dialect; the others are the dialect's (dialect.GroupSQL).
const (
	selectReleased = `SELECT RELEASED FROM {prefix}GROUP_MESSAGE WHERE GROUP_KEY = :group_key AND REGION = :region ` +
		`AND MESSAGE_KEY = :message_key`
	addMessage = `UPDATE {prefix}GROUP SET MESSAGE_COUNT = MESSAGE_COUNT + 1, LAST_POSITION = :position, ` +
		`VERSION = VERSION + 1, UPDATED_DATE = {now}`
	dueIn         = `, DUE_AT = {now+:timeout}, CLAIMED_UNTIL = NULL`
	whereGroup    = ` WHERE GROUP_KEY = :group_key AND REGION = :region`
	selectVersion = `SELECT VERSION FROM {prefix}GROUP` + whereGroup
	// keyUnseen is :group_key as PostgreSQL's planner cannot see it (an
	// uncommon key looks cheaper than the average, so a release was planned
	// anew at every call instead of taking the cached generic plan), in the
	// conditions on the message table of PostgreSQL's release (UpdateWith).
	keyUnseen      = `(SELECT CAST(:group_key AS CHAR(36)))`
	removeGroup    = `DELETE FROM {prefix}GROUP` + whereGroup
	removeMessages = `DELETE FROM {prefix}GROUP_MESSAGE` + whereGroup
	selectDue      = `SELECT CORRELATION_KEY, GROUP_KEY, VERSION, DUE_AT FROM {prefix}GROUP WHERE REGION = :region AND ` +
		dialect.DueGroup + ` ORDER BY DUE_AT LIMIT :limit`
	claimOne = `UPDATE {prefix}GROUP SET CLAIMED_UNTIL = {now+:lease}` + whereGroup + ` AND VERSION = :version AND ` +
		dialect.DueGroup
)

// The parts of an Update, in the bits of an update shape.
const (
	shapeRelease = 1 << iota
	shapeComplete
	shapeSequence
	shapeTimeout
	shapeClearTimeout
	shapeIfVersion
	shapes
)

// releaseOf releases the unreleased messages of the group whose key is
// the SQL expression key.
func releaseOf(key string) string {
	return `UPDATE {prefix}GROUP_MESSAGE SET RELEASED = 1, METADATA = NULL, PAYLOAD = NULL WHERE GROUP_KEY = ` + key +
		` AND REGION = :region AND RELEASED = 0`
}

// updateStatement is the UPDATE of the group table for an update of shape.
func updateStatement(shape int) string { return updateWith(shape, "") }

// updateWith is updateStatement; with released, the WITH query (its
// text) that released messages in the same statement: as the count reads
// the statement's snapshot, taken before the release, it subtracts them.
// That form is PostgreSQL's, and its count reads the key as keyUnseen.
func updateWith(shape int, released string) string {
	set := `VERSION = VERSION + 1, UPDATED_DATE = {now}`
	if shape&shapeRelease != 0 {
		key := `:group_key`
		if released != "" {
			key = keyUnseen
		}
		set += `, RELEASES = RELEASES + 1, MESSAGE_COUNT = (SELECT COUNT(*) FROM {prefix}GROUP_MESSAGE m ` +
			`WHERE m.GROUP_KEY = ` + key + ` AND m.REGION = :region AND m.RELEASED = 0)`
		if released != "" {
			set += ` - (SELECT COUNT(*) FROM r)`
		}
	}
	if shape&shapeComplete != 0 {
		set += `, COMPLETE = 1`
	}
	if shape&shapeSequence != 0 {
		set += `, LAST_RELEASED_SEQUENCE = :sequence`
	}
	switch {
	case shape&shapeTimeout != 0:
		set += dueIn
	case shape&shapeClearTimeout != 0:
		set += `, DUE_AT = NULL, CLAIMED_UNTIL = NULL`
	}
	where := whereGroup
	if shape&shapeIfVersion != 0 {
		where += ` AND VERSION = :version`
	}
	update := `UPDATE {prefix}GROUP SET ` + set + where
	if released != "" {
		return `WITH r AS (` + released + ` RETURNING 1) ` + update
	}
	return update
}

// statements are a store's compiled statements.
type statements struct {
	upsert, lockGroup, insertMessage, selectReleased dialect.Query
	addMessage                                       [2]dialect.Query    // without, with a timeout
	addOne                                           [2]dialect.Query    // the dialect's AddMessage, if any
	addProbe                                         [2]dialect.Query    // the dialect's AddProbe, if any
	addBatch                                         [3]dialect.Query    // the dialect's AddBatch (without, with probes, with probes and summaries), if any
	addInPlace                                       [2][2]dialect.Query // the dialect's AddInPlace (without, with a probe; without, with a timeout), if any
	addSummary                                       [2]dialect.Query    // the dialect's AddSummary, if any
	summarize, probeAfter                            dialect.Query       // the dialect's Summarize and ProbeAfter, if any
	lockRow                                          dialect.Query
	selectGroup, selectVersion                       dialect.Query
	lockGet                                          dialect.Query // the dialect's LockGet, if any
	update                                           [shapes]dialect.Query
	releaseAll, releaseListed                        dialect.Query
	releaseUpdate                                    [shapes][2]dialect.Query // all, listed; where UpdateWith, for shapes that release
	remove                                           [2]dialect.Query         // any version, a given one
	removeMessages                                   dialect.Query
	claimDue, selectDue, claimOne                    dialect.Query
	sweepMessages, sweepGroups, selectFinished       dialect.Query
}

// compile compiles the statements of the group tables with prefix for d.
func compile(d *dialect.Dialect, prefix string) *statements {
	c := func(template string) dialect.Query {
		if template == "" {
			return dialect.Query{}
		}
		return d.MustCompile(template, prefix, dialect.GroupParams...)
	}
	g := d.Group
	s := &statements{
		upsert: c(g.Upsert), lockGroup: c(g.LockGroup), insertMessage: c(g.InsertMessage), selectReleased: c(selectReleased),
		addMessage: [2]dialect.Query{c(addMessage + whereGroup), c(addMessage + dueIn + whereGroup)},
		addOne:     [2]dialect.Query{c(g.AddMessage[0]), c(g.AddMessage[1])}, lockRow: c(g.LockRow),
		addProbe: [2]dialect.Query{c(g.AddProbe[0]), c(g.AddProbe[1])},
		addBatch: [3]dialect.Query{c(g.AddBatch[0]), c(g.AddBatch[1]), c(g.AddBatch[2])},
		addInPlace: [2][2]dialect.Query{{c(g.AddInPlace[0][0]), c(g.AddInPlace[0][1])},
			{c(g.AddInPlace[1][0]), c(g.AddInPlace[1][1])}},
		addSummary: [2]dialect.Query{c(g.AddSummary[0]), c(g.AddSummary[1])},
		summarize:  c(g.Summarize), probeAfter: c(g.ProbeAfter),
		selectGroup: c(dialect.SelectGroup), lockGet: c(g.LockGet), selectVersion: c(selectVersion),
		releaseAll: c(releaseOf(`:group_key`)), releaseListed: c(releaseOf(`:group_key`) + ` AND MESSAGE_KEY IN {list}`),
		remove:         [2]dialect.Query{c(removeGroup), c(removeGroup + ` AND VERSION = :version`)},
		removeMessages: c(removeMessages),
		claimDue:       c(g.ClaimDue), selectDue: c(selectDue), claimOne: c(claimOne),
		sweepMessages: c(g.SweepMessages), sweepGroups: c(g.SweepGroups), selectFinished: c(g.SelectFinished),
	}
	for shape := range s.update {
		s.update[shape] = c(updateStatement(shape))
		if g.UpdateWith && shape&shapeRelease != 0 {
			s.releaseUpdate[shape] = [2]dialect.Query{c(updateWith(shape, releaseOf(keyUnseen))),
				c(updateWith(shape, releaseOf(keyUnseen)+` AND MESSAGE_KEY IN {list}`))}
		}
	}
	return s
}

// values are the values the group statements' parameters take.
type values struct {
	groupKey, region, correlationKey, groupID, messageKey, messageID string
	position                                                         int64
	metadata                                                         any // JSON text or nil
	payload                                                          []byte
	timeout, version, sequence, lease, retention                     int64
	limit, batch                                                     int
	probe                                                            *groupstore.Probe // AddProbe's, nil for Add
	probeKeys                                                        string            // the probe's keys as AddSummary's :probe_keys; "" where its values are not the message's own
	rows                                                             string            // AddBatch's JSON
}

// args returns the arguments of q, with list in its {list}.
func (v *values) args(q dialect.Query, list ...any) []any {
	return q.Args(v.value, list...)
}

func (v *values) value(name string) any {
	switch name {
	case dialect.GroupKey:
		return v.groupKey
	case dialect.Region:
		return v.region
	case dialect.CorrelationKey:
		return v.correlationKey
	case dialect.GroupID:
		return v.groupID
	case dialect.MessageKey:
		return v.messageKey
	case dialect.MessageID:
		return v.messageID
	case dialect.Position:
		return v.position
	case dialect.Metadata:
		return v.metadata
	case dialect.Payload:
		return v.payload
	case dialect.Timeout:
		return v.timeout
	case dialect.Version:
		return v.version
	case dialect.Sequence:
		return v.sequence
	case dialect.Limit:
		return v.limit
	case dialect.Lease:
		return v.lease
	case dialect.Retention:
		return v.retention
	case dialect.Batch:
		return v.batch
	case dialect.Rows:
		return v.rows
	case dialect.ProbeKeys:
		return v.probeKeys
	}
	if p := v.probe; p != nil {
		switch name {
		case dialect.UniqueKey:
			return p.UniqueKey
		case dialect.Unique:
			return p.Unique
		case dialect.SameKey:
			return p.SameKey
		case dialect.Same:
			return p.Same
		}
	}
	return nil
}
