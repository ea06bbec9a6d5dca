package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/lockreg/lockreg/groupstore"
	"github.com/lockreg/lockreg/internal/dialect"
)

// Add implements [groupstore.Store.Add].
func (s *Store) Add(ctx context.Context, key string, msg groupstore.Message, timeout time.Duration) (groupstore.Group, groupstore.Outcome, error) {
	g, o, _, err := s.add(ctx, nil, key, msg, timeout, nil)
	return g, o, err
}

var _ groupstore.Prober = (*Store)(nil)

// Probes implements [groupstore.Prober]: true on PostgreSQL, where
// AddProbe is Add's one statement with the probe in it. On MySQL and
// SQLite it is false, and AddProbe is Add.
func (s *Store) Probes() bool { return s.sql.addProbe[0].SQL != "" }

// AddProbe implements [groupstore.Prober]. On PostgreSQL it costs what
// Add costs, one statement in the usual case (see Store). Where msg's own
// metadata values under p's keys are p's values (the resequencer's always
// are) and the group table has script 000008's columns, the statement
// reads the fit from the probe summary that the group's row keeps (the
// values of the group's unreleased messages under p's keys) and adds
// msg's values to it, reading no message. After another change of the
// group (a plain Add, a release) or under other keys, a second statement
// builds the summary again from the messages' metadata (as JSON); for a
// group of more than 256 unreleased messages, which keeps no summary, it
// reads the messages instead. Without the columns the one statement reads
// the messages, and reports no fit when another transaction changed the
// group while it waited for the group row's lock. Elsewhere AddProbe is
// Add and reports no fit.
func (s *Store) AddProbe(ctx context.Context, key string, msg groupstore.Message, timeout time.Duration, p groupstore.Probe) (groupstore.Group, groupstore.Outcome, bool, error) {
	if !s.Probes() {
		g, o, err := s.Add(ctx, key, msg, timeout)
		return g, o, false, err
	}
	return s.add(ctx, nil, key, msg, timeout, &p)
}

// querier runs statements: the store's database or a transaction.
type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// add is Add in tx, or without one in a transaction of its own: one
// statement where the dialect has a one-statement add (PostgreSQL), else
// BEGIN, the statements and COMMIT. With probe (PostgreSQL only) it
// probes in that statement and reports the fit.
func (s *Store) add(ctx context.Context, tx *sql.Tx, key string, msg groupstore.Message, timeout time.Duration,
	probe *groupstore.Probe) (groupstore.Group, groupstore.Outcome, bool, error) {
	what := "sqlstore: add " + dialect.Quote(key)
	if msg.UUID == "" {
		return groupstore.Group{}, 0, false, fmt.Errorf("%s: message without UUID", what)
	}
	v := s.values(key)
	v.groupID, v.messageKey, v.messageID, v.payload = uuid.NewString(), messageKeyOf(msg.UUID), msg.UUID, msg.Payload
	v.timeout, v.probe = dialect.Micros(timeout), probe
	if probe != nil && ownValues(msg.Metadata, probe) {
		v.probeKeys = strconv.Itoa(len(probe.UniqueKey)) + ":" + probe.UniqueKey + probe.SameKey
	}
	if len(msg.Metadata) > 0 { // NULL for no metadata
		b, err := json.Marshal(msg.Metadata)
		if err != nil {
			return groupstore.Group{}, 0, false, fmt.Errorf("%s: %w", what, err)
		}
		v.metadata = string(b)
	}
	s.cleaner.Start() // the tables have rows to clean from now on
	if tx == nil {
		if err := s.gate.wait(ctx, key); err != nil {
			return groupstore.Group{}, 0, false, s.wrap(ctx, what, err)
		}
	}
	var (
		g       groupstore.Group
		outcome groupstore.Outcome
		fits    bool
		err     error
	)
	switch one := s.sql.addOne[0].SQL != ""; {
	case one && tx != nil:
		g, outcome, fits, err = s.addOne(ctx, tx, false, key, v, timeout)
	case one && s.batch != nil:
		c := &addCall{ctx: ctx, key: key, v: v, timeout: timeout}
		s.batch.add(c)
		g, outcome, fits, err = c.g, c.outcome, c.fits, c.err
	case one:
		err = s.retry(ctx, func() (err error) {
			g, outcome, fits, err = s.addOne(ctx, s.db, true, key, v, timeout)
			return err
		})
	case tx != nil:
		g, outcome, err = s.addIn(ctx, tx, key, v, timeout) // no probe: only PostgreSQL has one
		if errors.Is(err, errNoChange) {
			err = nil // it changed nothing: the caller's transaction goes on
		}
	default:
		err = s.inTx(ctx, func(tx *sql.Tx) (err error) {
			g, outcome, err = s.addIn(ctx, tx, key, v, timeout)
			return err
		})
	}
	if err != nil {
		return groupstore.Group{}, 0, false, s.wrap(ctx, what, err)
	}
	return g, outcome, fits, nil
}

// addOne adds the message of v with the dialect's one-statement add on q,
// a transaction of the caller's or, where alone, the store's pool. Alone,
// the dialect's AddInPlace goes first where it has one; a complete group,
// a redelivery or a group created meanwhile then costs AddMessage after
// it. Only a complete group that did not take the message costs a
// statement more, which tells a redelivery from a late message by a
// fresh read. With v.probe it probes too and reports the fit.
func (s *Store) addOne(ctx context.Context, q querier, alone bool, key string, v *values, timeout time.Duration) (groupstore.Group, groupstore.Outcome, bool, error) {
	probe, due := 0, 0
	if v.probe != nil {
		probe = 1
	}
	if timeout > 0 {
		due = 1
	}
	var (
		row         groupRow
		added, fits int64
	)
	dest := append(row.dest(), &added)
	if probe == 1 {
		dest = append(dest, &fits)
	}
	inPlace := alone
	if sum := s.sql.addSummary[due]; inPlace && v.probeKeys != "" && sum.SQL != "" && !s.noSummary.Load() {
		var known sql.NullInt64
		err := q.QueryRowContext(ctx, sum.SQL, v.args(sum)...).Scan(append(row.dest(), &added, &known)...)
		switch {
		case err == nil:
			if fits = known.Int64; !known.Valid {
				if fits, err = s.probeAfter(ctx, q, v, &row); err != nil {
					return groupstore.Group{}, 0, false, err
				}
			}
			return s.added(ctx, q, key, v, &row, added, fits)
		case dialect.IsUndefinedColumn(err): // a table without script 000008's columns: probe as before
			s.noSummary.Store(true)
		case !errors.Is(err, sql.ErrNoRows) && dialect.SQLState(err) != uniqueViolation:
			return groupstore.Group{}, 0, false, err
		default:
			inPlace = false // the outcomes that the locking statement decides
		}
	}
	if in := s.sql.addInPlace[probe][due]; inPlace && in.SQL != "" {
		err := q.QueryRowContext(ctx, in.SQL, v.args(in)...).Scan(dest...)
		if err == nil {
			return s.added(ctx, q, key, v, &row, added, fits)
		}
		if !errors.Is(err, sql.ErrNoRows) && dialect.SQLState(err) != uniqueViolation {
			return groupstore.Group{}, 0, false, err
		}
	}
	add := s.sql.addOne[due]
	if probe == 1 {
		add = s.sql.addProbe[due]
	}
	if err := q.QueryRowContext(ctx, add.SQL, v.args(add)...).Scan(dest...); err != nil {
		return groupstore.Group{}, 0, false, err
	}
	return s.added(ctx, q, key, v, &row, added, fits)
}

// probeAfter returns the fit of the message of v that AddSummary added
// to a group without a summary, which row describes after the Add: it
// builds the summary (Summarize), or for a group too large for one reads
// the messages (ProbeAfter). Either reports no fit where the group
// changed since the Add.
func (s *Store) probeAfter(ctx context.Context, q querier, v *values, row *groupRow) (int64, error) {
	v.version = row.version
	st := s.sql.summarize
	if row.count > dialect.SummaryCap {
		st = s.sql.probeAfter
	}
	var fits int64
	if err := q.QueryRowContext(ctx, st.SQL, v.args(st)...).Scan(&fits); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return 0, err
	}
	return fits, nil
}

// uniqueViolation is PostgreSQL's SQLSTATE of a duplicate key.
const uniqueViolation = "23505"

// ownValues reports whether md's values under p's keys are p's values, as
// the probe's SQL reads them (probeNumber), so that AddSummary may keep
// them in the group's probe summary as the message's. The resequencer's
// are always.
func ownValues(md map[string]string, p *groupstore.Probe) bool {
	if p.UniqueKey == "" || p.SameKey == "" {
		return false
	}
	if n, ok := probeNumber(md[p.UniqueKey]); !ok || n != p.Unique {
		return false
	}
	same, ok := md[p.SameKey]
	if !ok {
		return p.Same == 0 // absent is 0
	}
	n, ok := probeNumber(same)
	return ok && n == p.Same
}

// probeNumber is text as the probe's SQL reads a number: an optional "+"
// and 1 to 18 decimal digits.
func probeNumber(text string) (int64, bool) {
	digits := strings.TrimPrefix(text, "+")
	if len(digits) == 0 || len(digits) > 18 || strings.ContainsFunc(digits, func(r rune) bool { return r < '0' || r > '9' }) {
		return 0, false
	}
	n, err := strconv.ParseInt(digits, 10, 64)
	return n, err == nil
}

// added returns what the one-statement Add of v to the group of key did,
// from the group's row and ADDED and FITS as it returned them; a message
// that a complete group does not hold costs one more statement on q.
func (s *Store) added(ctx context.Context, q querier, key string, v *values, row *groupRow, added, fits int64) (groupstore.Group, groupstore.Outcome, bool, error) {
	g, err := row.group(key)
	if err != nil {
		return g, 0, false, err
	}
	switch {
	case added == 1:
		return g, groupstore.Added, fits == 1, nil
	case !g.Complete:
		return g, groupstore.Duplicate, fits == 1, nil
	}
	o, err := s.knownOrLate(ctx, q, v)
	return g, o, fits == 1, err
}

// knownOrLate tells whether the complete group of v knows its message
// (Duplicate) or not (Rejected).
func (s *Store) knownOrLate(ctx context.Context, q querier, v *values) (groupstore.Outcome, error) {
	var released int64
	sel := s.sql.selectReleased
	switch err := q.QueryRowContext(ctx, sel.SQL, v.args(sel)...).Scan(&released); {
	case errors.Is(err, sql.ErrNoRows):
		return groupstore.Rejected, nil
	case err != nil:
		return 0, err
	}
	return groupstore.Duplicate, nil
}

// addIn adds the message of v in tx, statement by statement. It returns
// errNoChange with the outcome when it changed nothing.
func (s *Store) addIn(ctx context.Context, tx *sql.Tx, key string, v *values, timeout time.Duration) (groupstore.Group, groupstore.Outcome, error) {
	var row groupRow
	up := s.sql.upsert
	var err error
	if s.sql.lockGroup.SQL == "" {
		err = tx.QueryRowContext(ctx, up.SQL, v.args(up)...).Scan(row.dest()...)
	} else if _, err = tx.ExecContext(ctx, up.SQL, v.args(up)...); err == nil {
		lock := s.sql.lockGroup
		err = tx.QueryRowContext(ctx, lock.SQL, v.args(lock)...).Scan(row.dest()...)
	}
	if err != nil {
		return groupstore.Group{}, 0, err
	}
	g, err := row.group(key)
	if err != nil {
		return g, 0, err
	}
	if g.Complete {
		o, err := s.knownOrLate(ctx, tx, v)
		if err != nil {
			return g, 0, err
		}
		return g, o, errNoChange
	}
	v.position = row.lastPosition + 1
	ins := s.sql.insertMessage
	if n, err := dialect.Count(tx.ExecContext(ctx, ins.SQL, v.args(ins)...)); err != nil {
		return g, 0, err
	} else if n == 0 {
		return g, groupstore.Duplicate, errNoChange
	}
	upd := s.sql.addMessage[0]
	if timeout > 0 {
		upd = s.sql.addMessage[1]
	}
	if _, err := tx.ExecContext(ctx, upd.SQL, v.args(upd)...); err != nil {
		return g, 0, err
	}
	g.Size++
	g.Version++
	return g, groupstore.Added, nil
}
