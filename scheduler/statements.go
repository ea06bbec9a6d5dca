package scheduler

import (
	"hash/fnv"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lockreg/lockreg/internal/dialect"
)

// The parameters of the statements.
const (
	pTask    = "task"
	pInst    = "inst"
	pData    = "data"
	pAt      = "at"
	pBy      = "by"
	pVersion = "version"
	pN       = "n"
	pDelay   = "delay"
	pTZ      = "tz"
	pPrio    = "prio"
	pChannel = "channel"
	pWithin  = "within"
)

var allParams = []string{pTask, pInst, pData, pAt, pBy, pVersion, pN, pDelay, pTZ, pPrio, pChannel, pWithin}

// statements are the compiled statements of one table. The transitions of
// a picked row follow db-scheduler's protocol: each is guarded by the
// version the scheduler read and adds 1 to it.
type statements struct {
	s *settled

	insert, get, remove, lockRow       dialect.Query
	heartbeat, unpick, removeIn        dialect.Query // heads of guarded statements, ending in WHERE
	pick, pickSelect, pickUpdate       dialect.Query // pick (PostgreSQL, SQLite) or pickSelect+pickUpdate (MySQL)
	dead, nextDue, unresolved, due     dialect.Query
	reschedule, cancel, rescheduleData dialect.Query // the client's, on unpicked rows

	mu    sync.Mutex
	compl map[complKey]dialect.Query // completions by kind
}

func (s *settled) compile() *statements {
	c := func(q string) dialect.Query { return s.d.MustCompile(s.expand(q), "", allParams...) }
	// The {list} of the scheduler's statements is its task names.
	cl := func(q string) dialect.Query {
		x := c(q)
		x.SQL = x.WithList(len(s.names))
		return x
	}
	st := &statements{s: s, compl: make(map[complKey]dialect.Query)}
	prio := `:prio`
	if !s.Priority {
		prio = `NULL`
	}
	values := `(task_name, task_instance, task_data, execution_time, picked, version, priority) ` +
		`VALUES (:task, :inst, :data, :at, false, 1, ` + prio + `)`
	switch s.d.Name {
	case "postgres":
		ins := `INSERT INTO {t} ` + values + ` ON CONFLICT DO NOTHING`
		if s.NoNotify {
			st.insert = c(`WITH i AS (` + ins + ` RETURNING 1) SELECT COUNT(*) FROM i`)
		} else {
			// The notification goes out at commit, with the due time in
			// epoch milliseconds, only for an execution due soon.
			st.insert = c(`WITH i AS (` + ins + ` RETURNING execution_time) SELECT (SELECT COUNT(*) FROM i), ` +
				`(SELECT COUNT(*) FROM (SELECT pg_notify(:channel, CAST(CAST(EXTRACT(EPOCH FROM execution_time) * 1000 AS BIGINT) AS TEXT)) ` +
				`FROM i WHERE execution_time <= @now+:within) n)`)
		}
	case "mysql":
		st.insert = c(`INSERT INTO {t} ` + values + ` ON DUPLICATE KEY UPDATE task_name = task_name`)
	default:
		st.insert = c(`INSERT INTO {t} ` + values + ` ON CONFLICT DO NOTHING`)
	}
	key := `task_name = :task AND task_instance = :inst`
	st.get = c(`SELECT ` + columns + ` FROM {t} WHERE ` + key)
	st.heartbeat = c(`UPDATE {t} SET last_heartbeat = @now WHERE `)
	st.unpick = c(`UPDATE {t} SET picked = false, picked_by = NULL, last_heartbeat = NULL, version = version + 1 WHERE `)
	st.removeIn = c(`DELETE FROM {t} WHERE `)
	st.remove = c(`DELETE FROM {t} WHERE ` + key + ` AND version = :version`)
	if s.d.Name != "sqlite" {
		// A revive skips a row another transaction holds (a paused node's
		// heartbeat or completion) rather than wait for it.
		st.lockRow = c(`SELECT 1 FROM {t} WHERE ` + key + ` AND version = :version FOR UPDATE SKIP LOCKED`)
	}
	st.reschedule = c(`UPDATE {t} SET execution_time = :at, version = version + 1 WHERE ` + key + ` AND picked = false`)
	st.rescheduleData = c(`UPDATE {t} SET execution_time = :at, task_data = :data, version = version + 1 WHERE ` + key + ` AND picked = false`)
	st.cancel = c(`DELETE FROM {t} WHERE ` + key + ` AND picked = false`)

	order := `execution_time`
	if s.Priority {
		order = `priority DESC, execution_time`
	}
	due := `picked = false AND execution_time <= @now AND task_name IN {list}`
	if s.d.Name == "postgres" {
		// task_name || '' keeps the planner off the primary key (task_name
		// first), whose bitmap with dead versions made a pick read every
		// due row; the pick reads execution_time_idx and filters.
		due = `picked = false AND execution_time <= @now AND task_name || '' IN {list}`
	}
	set := `SET picked = true, picked_by = :by, last_heartbeat = @now, version = version + 1`
	switch s.d.Name {
	case "postgres":
		// The rows locked are updated by ctid, a TID scan whatever the
		// statistics: a join back to the table by key lets a generic plan
		// (LIMIT unknown) or stale statistics scan the whole table.
		st.pick = cl(`UPDATE {t} ` + set + ` WHERE ctid = ANY(ARRAY(SELECT ctid FROM {t} WHERE ` +
			due + ` ORDER BY ` + order + ` LIMIT :n FOR UPDATE SKIP LOCKED)) AND picked = false RETURNING ` + columns)
	case "mysql":
		st.pickSelect = cl(`SELECT ` + columns + ` FROM {t} WHERE ` + due + ` ORDER BY ` + order + ` LIMIT :n FOR UPDATE SKIP LOCKED`)
		// The keys follow, as tuples(n): Compile's {list} has one value each.
		st.pickUpdate = c(`UPDATE {t} ` + set + ` WHERE picked = false AND `)
	default:
		st.pick = cl(`UPDATE {t} ` + set + ` WHERE rowid IN (SELECT rowid FROM {t} WHERE ` + due + ` ORDER BY ` + order +
			` LIMIT :n) RETURNING ` + columns)
	}
	st.dead = cl(`SELECT ` + columns + ` FROM {t} WHERE picked = true AND last_heartbeat <= @now-:delay AND task_name IN {list}`)
	st.nextDue = cl(`SELECT MIN(execution_time), @now FROM {t} WHERE picked = false AND task_name IN {list}`)
	st.unresolved = cl(`DELETE FROM {t} WHERE picked = false AND execution_time <= @now-:delay AND task_name NOT IN {list}`)
	st.due = cl(`SELECT COUNT(*) FROM {t} WHERE ` + due)
	return st
}

// complKey is the kind of a completion's UPDATE.
type complKey struct {
	failure  bool // a failure: last_failure and consecutive_failures+1; else a success
	relative bool // execution_time from the database's clock plus :delay; else :at
	data     bool // task_data replaced
}

// completion returns the UPDATE that reschedules a picked row.
func (st *statements) completion(k complKey) dialect.Query {
	st.mu.Lock()
	defer st.mu.Unlock()
	if q, ok := st.compl[k]; ok {
		return q
	}
	var b strings.Builder
	b.WriteString(`UPDATE {t} SET picked = false, picked_by = NULL, last_heartbeat = NULL, version = version + 1, `)
	if k.failure {
		b.WriteString(`last_failure = @now, consecutive_failures = COALESCE(consecutive_failures, 0) + 1, `)
	} else {
		b.WriteString(`last_success = @now, consecutive_failures = 0, `)
	}
	if k.data {
		b.WriteString(`task_data = :data, `)
	}
	if k.relative {
		b.WriteString(`execution_time = @now+:delay`)
	} else {
		b.WriteString(`execution_time = :at`)
	}
	b.WriteString(` WHERE task_name = :task AND task_instance = :inst AND version = :version`)
	q := st.s.d.MustCompile(st.s.expand(b.String()), "", allParams...)
	st.compl[k] = q
	return q
}

// vals are the values of one statement's parameters.
type vals struct {
	task, inst string
	data       []byte
	at         time.Time
	version    int64
	n          int
	delay      time.Duration
	prio       int
}

// args returns q's arguments for v, then list.
func (st *statements) args(q dialect.Query, v vals, list ...any) []any {
	s := st.s
	return q.Args(func(p string) any {
		switch p {
		case pTask:
			return v.task
		case pInst:
			return v.inst
		case pData:
			return v.data
		case pAt:
			return s.bindTime(v.at)
		case pBy:
			return s.Name
		case pVersion:
			return v.version
		case pN:
			return v.n
		case pDelay:
			return dialect.Micros(v.delay)
		case pTZ:
			return s.tzOffset()
		case pPrio:
			return v.prio
		case pChannel:
			return s.channel()
		case pWithin:
			return dialect.Micros(s.PollInterval)
		}
		panic("scheduler: no value for parameter :" + p)
	}, list...)
}

// channel is the PostgreSQL notification channel of the table, within
// PostgreSQL's 63 bytes of an identifier.
func (s *settled) channel() string {
	c := "lockreg_scheduler_" + strings.ToLower(strings.ReplaceAll(s.Table, ".", "_"))
	if len(c) > 63 {
		h := fnv.New64a()
		h.Write([]byte(s.Table))
		c = c[:63-17] + "_" + strconv.FormatUint(h.Sum64(), 16)
	}
	return c
}

// tuples returns "((task_name = ? AND task_instance = ?) OR ...)" for n
// keys: MySQL's placeholders. MariaDB reads a row IN of one tuple with a
// full scan, locking every row; a disjunction of keys is a range read.
func tuples(n int) string {
	return "(" + strings.TrimSuffix(strings.Repeat("(task_name = ? AND task_instance = ?) OR ", n), " OR ") + ")"
}
