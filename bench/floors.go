package main

// The durable floors: the least a durable database does for what a
// scenario measures, run on the same server in the same run as the
// contestants, so that each contestant is also reported as a ratio to its
// floor (docs/benchmarks.md, "Durable floors"). A floor excludes nothing,
// queues nothing and expires nothing: it is the cost of the commits alone.

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/lockreg/lockreg/aggregator"
)

// The floors' tables, beside the contestants'.
const (
	floorMessages = "bench_floor_message"
	floorGroups   = "bench_floor_group"
	floorLocks    = "bench_floor_lock"
	floorOpen     = 200 // the open groups floor-add updates
	floorChannel  = "bench_floor_handoff"
)

// floorName is the name of floor kind on server: PostgreSQL's is bare,
// the others carry the server's name.
func floorName(server, kind string) string {
	if server == "postgres" {
		return kind
	}
	return server + "-" + kind
}

// floorDDL returns the statements that create the floors' tables on server.
func floorDDL(server string) []string {
	text, bytes, ts, key := "TEXT", "BYTEA", "TIMESTAMP", "VARCHAR(255)"
	switch server {
	case "mariadb":
		text, bytes, ts = "TEXT", "BLOB", "DATETIME(6)"
	case "sqlite":
		bytes, ts = "BLOB", "INTEGER"
	}
	return []string{
		`CREATE TABLE IF NOT EXISTS ` + floorMessages + ` (group_key CHAR(36) NOT NULL, message_key CHAR(36) NOT NULL, ` +
			`message_id ` + key + ` NOT NULL, metadata ` + text + `, payload ` + bytes + `, created ` + ts + ` NOT NULL, ` +
			`PRIMARY KEY (group_key, message_key))`,
		`CREATE TABLE IF NOT EXISTS ` + floorGroups + ` (group_key CHAR(36) NOT NULL PRIMARY KEY, ` +
			`message_count BIGINT NOT NULL, version BIGINT NOT NULL)`,
		`CREATE TABLE IF NOT EXISTS ` + floorLocks + ` (lock_key ` + key + ` NOT NULL PRIMARY KEY, holder ` + key + `, expires ` + ts + `)`,
	}
}

// floorNow is server's clock as the floors' timestamp columns hold it.
func floorNow(server string) string {
	switch server {
	case "mariadb":
		return `UTC_TIMESTAMP(6)`
	case "sqlite":
		return `CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)`
	}
	return `LOCALTIMESTAMP`
}

// floorLater is server's clock 10 s on: a lease's expiry.
func floorLater(server string) string {
	switch server {
	case "mariadb":
		return `UTC_TIMESTAMP(6) + INTERVAL 10 SECOND`
	case "sqlite":
		return floorNow(server) + ` + 10000`
	}
	return `LOCALTIMESTAMP + INTERVAL '10 seconds'`
}

// ph returns server's placeholders for n parameters.
func ph(server string, n int) []any {
	out := make([]any, n)
	for i := range out {
		if server == "postgres" {
			out[i] = "$" + strconv.Itoa(i+1)
		} else {
			out[i] = "?"
		}
	}
	return out
}

// openFloorDB opens a counted pool of size pool on server and creates the
// floors' tables.
func openFloorDB(ctx context.Context, e *env, server string, pool int) (*sql.DB, *counter, error) {
	var (
		db  *sql.DB
		c   *counter
		err error
	)
	switch server {
	case "postgres":
		db, c, err = openPgx(e.pgDSN, pool)
	case "mariadb":
		db, c, err = openCounted("mysql", e.myDSN, pool)
	case "sqlite":
		db, c, err = openCounted("sqlite", e.sqliteDSN, pool)
	default:
		err = fmt.Errorf("no floor on %s", server)
	}
	if err != nil {
		return nil, nil, err
	}
	for _, q := range floorDDL(server) {
		if _, err := db.ExecContext(ctx, q); err != nil {
			db.Close()
			return nil, nil, fmt.Errorf("%s: %w", q, err)
		}
	}
	return db, c, nil
}

// serverErr says why server cannot be used, or nil.
func (e *env) serverErr(server string) error {
	switch server {
	case "postgres":
		return e.pgErr
	case "mariadb":
		return e.myErr
	case "sqlite":
		return e.sqliteErr
	}
	return nil
}

// A groupFloor is a floor of the aggregator and resequencer scenarios:
// each transaction stores one message row of the benchmark's size (its
// payload and its three metadata keys) and, for floor-add, updates its
// group's row among floorOpen open groups.
type groupFloor struct {
	name   string
	server string
	add    bool
}

var groupFloors = []groupFloor{
	{name: "floor-insert", server: "postgres"},
	{name: "floor-add", server: "postgres", add: true},
	{name: "mariadb-floor-insert", server: "mariadb"},
	{name: "mariadb-floor-add", server: "mariadb", add: true},
	{name: "sqlite-floor-insert", server: "sqlite"},
	{name: "sqlite-floor-add", server: "sqlite", add: true},
}

// workers is as many workers as the server's multi-instance variant has
// in all (postgres-4 and mariadb-4: 4 × -pg4-workers; sqlite-1: -sqlite-workers).
func (f groupFloor) workers(cfg config) int {
	if f.server == "sqlite" {
		return cfg.sqliteWorkers
	}
	return 4 * cfg.pg4Workers
}

// floorGroupRun measures f in scenario's table for the warm-up and the
// measured duration of cfg.
func floorGroupRun(ctx context.Context, e *env, scenario string, f groupFloor, cfg config) (result, error) {
	res := result{Scenario: scenario, Contestant: f.name}
	if err := e.serverErr(f.server); err != nil {
		res.Skipped = err.Error()
		return res, nil
	}
	workers := f.workers(cfg)
	db, c, err := openFloorDB(ctx, e, f.server, workers)
	if err != nil {
		return res, err
	}
	defer db.Close()
	groups, err := resetFloorGroups(ctx, db, f.server)
	if err != nil {
		return res, err
	}
	p := ph(f.server, 5)
	ins := fmt.Sprintf(`INSERT INTO `+floorMessages+` (group_key, message_key, message_id, metadata, payload, created) `+
		`VALUES (%s, %s, %s, %s, %s, `+floorNow(f.server)+`)`, p...)
	upd := fmt.Sprintf(`UPDATE `+floorGroups+` SET message_count = message_count + 1, version = version + 1 WHERE group_key = %s`, p[0])
	meta, _ := json.Marshal(map[string]string{aggregator.CorrelationIDKey: groups[0], aggregator.SequenceNumberKey: "3",
		aggregator.SequenceSizeKey: strconv.Itoa(groupSize)})
	one := func(ctx context.Context, g string) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		id := uuid.NewString()
		if _, err := tx.ExecContext(ctx, ins, g, id, id, string(meta), []byte(`{"g":123456,"s":3}`)); err != nil {
			return err
		}
		if f.add {
			if _, err := tx.ExecContext(ctx, upd, g); err != nil {
				return err
			}
		}
		return tx.Commit()
	}
	var (
		done, errs atomic.Int64
		counting   atomic.Bool
		wg         sync.WaitGroup
	)
	rctx, cancel := context.WithCancel(ctx)
	for w := range workers {
		wg.Go(func() {
			for k := w; rctx.Err() == nil; k += workers {
				if err := one(rctx, groups[k%len(groups)]); err != nil {
					if rctx.Err() == nil {
						errs.Add(1)
						e.logf("%s %s: %v", f.name, scenario, err)
					}
					continue
				}
				if counting.Load() {
					done.Add(1)
				}
			}
		})
	}
	time.Sleep(cfg.warmup)
	s0, c0 := c.n.Load(), c.commits.Load()
	counting.Store(true)
	start := time.Now()
	time.Sleep(cfg.duration)
	counting.Store(false)
	elapsed := time.Since(start)
	s1, c1 := c.n.Load(), c.commits.Load()
	cancel()
	wg.Wait()
	n := done.Load()
	res.MsgsPerSec = fp(float64(n) / elapsed.Seconds())
	res.OpsPerSec = res.MsgsPerSec
	res.Instances, res.Workers, res.Pool = ip(1), ip(int64(workers)), ip(int64(workers))
	res.Errors, res.Violations = ip(errs.Load()), ip(0)
	if n > 0 {
		res.StmtsPerOp = fp(float64(s1-s0) / float64(n))
		res.CommitsPerOp = fp(float64(c1-c0) / float64(n))
	}
	return res, nil
}

// resetFloorGroups empties the floors' message and group tables and opens
// floorOpen groups, returning their keys.
func resetFloorGroups(ctx context.Context, db *sql.DB, server string) ([]string, error) {
	empty := []string{"TRUNCATE TABLE " + floorMessages, "TRUNCATE TABLE " + floorGroups}
	if server == "sqlite" {
		empty = []string{"DELETE FROM " + floorMessages, "DELETE FROM " + floorGroups}
	}
	for _, q := range empty {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return nil, fmt.Errorf("%s: %w", q, err)
		}
	}
	p := ph(server, 1)
	groups := make([]string, floorOpen)
	for i := range groups {
		groups[i] = uuid.NewString()
		if _, err := db.ExecContext(ctx, fmt.Sprintf(`INSERT INTO `+floorGroups+` (group_key, message_count, version) VALUES (%s, 0, 1)`, p...), groups[i]); err != nil {
			return nil, err
		}
	}
	if server == "postgres" {
		for _, q := range []string{"VACUUM (ANALYZE) " + floorMessages + ", " + floorGroups, "CHECKPOINT"} {
			if _, err := db.ExecContext(ctx, q); err != nil {
				return nil, fmt.Errorf("%s: %w", q, err)
			}
		}
	}
	return groups, nil
}
