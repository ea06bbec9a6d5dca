package shedlock

import (
	"fmt"
	"strings"

	"github.com/lockreg/lockreg/internal/dialect"
)

// The parameters of the statements. App time binds :now, :lock_until and
// :unlock_time (wall times in the configured zone); database time binds
// :at_most and :at_least (microseconds).
const (
	pName       = "name"
	pLockedBy   = "locked_by"
	pNow        = "now"
	pLockUntil  = "lock_until"
	pUnlockTime = "unlock_time"
	pAtMost     = "at_most"
	pAtLeast    = "at_least"
)

var allParams = []string{pName, pLockedBy, pNow, pLockUntil, pUnlockTime, pAtMost, pAtLeast}

// templates are one dialect's ShedLock statements in one time mode, with
// {t} for the table. Acquire takes the lock if the row is missing or its
// lock_until has passed, and is judged by the rows it affects; where
// Insert is set, Acquire is only the UPDATE, and Insert, run when it
// affected nothing, inserts a missing row and affects nothing otherwise.
type templates struct {
	acquire, insert, extend, unlock string
}

// shedTemplates returns ShedLock's statements for the dialect and mode
// (ShedLock's SqlStatementsSource: PostgresSqlStatementsSource,
// PostgresSqlServerTimeStatementsSource, MySqlServerTimeStatementsSource and
// the generic one), with the differences the doc lists.
func shedTemplates(d string, dbTime bool) templates {
	if !dbTime {
		// The generic statements; PostgreSQL's insert is an upsert, and so
		// is SQLite's here (ShedLock has no SQLite support).
		t := templates{
			acquire: `UPDATE {t} SET lock_until = :lock_until, locked_at = :now, locked_by = :locked_by ` +
				`WHERE name = :name AND lock_until <= :now`,
			insert: `INSERT INTO {t}(name, lock_until, locked_at, locked_by) VALUES(:name, :lock_until, :now, :locked_by)`,
			extend: `UPDATE {t} SET lock_until = :lock_until WHERE name = :name AND locked_by = :locked_by AND lock_until > :now`,
			unlock: `UPDATE {t} SET lock_until = :unlock_time WHERE name = :name AND locked_by = :locked_by`,
		}
		switch d {
		case "mysql":
			t.insert = `INSERT IGNORE INTO {t}(name, lock_until, locked_at, locked_by) VALUES(:name, :lock_until, :now, :locked_by)`
		default:
			t.acquire = `INSERT INTO {t}(name, lock_until, locked_at, locked_by) VALUES(:name, :lock_until, :now, :locked_by) ` +
				`ON CONFLICT (name) DO UPDATE SET lock_until = :lock_until, locked_at = :now, locked_by = :locked_by ` +
				`WHERE {t}.lock_until <= :now`
			t.insert = ""
		}
		return t
	}
	var now, atMost, atLeastFromLockedAt string
	switch d {
	case "postgres":
		now = `timezone('utc', CURRENT_TIMESTAMP)`
		atMost = now + ` + CAST(:at_most AS BIGINT) * INTERVAL '1 microsecond'`
		atLeastFromLockedAt = `locked_at + CAST(:at_least AS BIGINT) * INTERVAL '1 microsecond'`
	case "mysql":
		now = `UTC_TIMESTAMP(3)`
		atMost = `TIMESTAMPADD(MICROSECOND, :at_most, UTC_TIMESTAMP(3))`
		atLeastFromLockedAt = `TIMESTAMPADD(MICROSECOND, :at_least, locked_at)`
	default: // sqlite: the tables' text format, to the millisecond
		now = `strftime('%Y-%m-%d %H:%M:%f', 'now')`
		atMost = `strftime('%Y-%m-%d %H:%M:%f', 'now', printf('%.6f seconds', :at_most / 1000000.0))`
		atLeastFromLockedAt = `strftime('%Y-%m-%d %H:%M:%f', locked_at, printf('%.6f seconds', :at_least / 1000000.0))`
	}
	set := `SET lock_until = ` + atMost + `, locked_at = ` + now + `, locked_by = :locked_by`
	t := templates{
		acquire: `UPDATE {t} ` + set + ` WHERE name = :name AND lock_until <= ` + now,
		extend:  `UPDATE {t} SET lock_until = ` + atMost + ` WHERE name = :name AND locked_by = :locked_by AND lock_until > ` + now,
		unlock: `UPDATE {t} SET lock_until = CASE WHEN ` + atLeastFromLockedAt + ` > ` + now + ` THEN ` + atLeastFromLockedAt +
			` ELSE ` + now + ` END WHERE name = :name AND locked_by = :locked_by`,
	}
	values := `VALUES(:name, ` + atMost + `, ` + now + `, :locked_by)`
	switch d {
	case "mysql":
		t.insert = `INSERT IGNORE INTO {t}(name, lock_until, locked_at, locked_by) ` + values
	default:
		t.acquire = `INSERT INTO {t}(name, lock_until, locked_at, locked_by) ` + values +
			` ON CONFLICT (name) DO UPDATE ` + set + ` WHERE {t}.name = :name AND {t}.lock_until <= ` + now
	}
	return t
}

// statements are the compiled statements of one table.
type statements struct {
	acquire, insert, extend, unlock dialect.Query // insert.SQL is "" where acquire upserts
	// On MySQL, whose driver counts changed rows (not matched ones, as
	// Connector/J does for ShedLock), an extend or unlock that writes the
	// values the row has (twice within a millisecond, or an unlock at the
	// lease's own end) affects nothing: these count the rows its WHERE
	// matches, run only then. Elsewhere they are empty.
	extendMatched, unlockMatched dialect.Query
}

func compile(d *dialect.Dialect, table string, dbTime bool) statements {
	t := shedTemplates(d.Name, dbTime)
	c := func(s string) dialect.Query {
		if s == "" {
			return dialect.Query{}
		}
		// {t} is not one of Compile's macros: the table goes in first.
		return d.MustCompile(replaceTable(s, table), "", allParams...)
	}
	s := statements{acquire: c(t.acquire), insert: c(t.insert), extend: c(t.extend), unlock: c(t.unlock)}
	if d.Name == "mysql" {
		s.extendMatched, s.unlockMatched = c(matched(t.extend)), c(matched(t.unlock))
	}
	return s
}

// matched turns an UPDATE into the SELECT that counts the rows its WHERE
// matches.
func matched(update string) string {
	return `SELECT COUNT(*) FROM {t}` + update[strings.LastIndex(update, " WHERE "):]
}

func replaceTable(s, table string) string {
	out := make([]byte, 0, len(s)+4*len(table))
	for i := 0; i < len(s); i++ {
		if i+2 < len(s) && s[i] == '{' && s[i+1] == 't' && s[i+2] == '}' {
			out = append(out, table...)
			i += 2
			continue
		}
		out = append(out, s[i])
	}
	return string(out)
}

// ddl returns ShedLock's CREATE TABLE for the dialect (its README's), with
// IF NOT EXISTS. SQLite, which ShedLock does not support, keeps times as
// text in the format its statements write.
func ddl(d, table string) string {
	switch d {
	case "postgres":
		return `CREATE TABLE IF NOT EXISTS ` + table + ` (name VARCHAR(64) NOT NULL, lock_until TIMESTAMP NOT NULL, ` +
			`locked_at TIMESTAMP NOT NULL, locked_by VARCHAR(255) NOT NULL, PRIMARY KEY (name))`
	case "mysql":
		return `CREATE TABLE IF NOT EXISTS ` + table + ` (name VARCHAR(64) NOT NULL, lock_until TIMESTAMP(3) NOT NULL, ` +
			`locked_at TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3), locked_by VARCHAR(255) NOT NULL, PRIMARY KEY (name))`
	case "sqlite":
		return `CREATE TABLE IF NOT EXISTS ` + table + ` (name VARCHAR(64) NOT NULL, lock_until TEXT NOT NULL, ` +
			`locked_at TEXT NOT NULL, locked_by VARCHAR(255) NOT NULL, PRIMARY KEY (name))`
	}
	panic(fmt.Sprintf("shedlock: no DDL for dialect %q", d))
}
