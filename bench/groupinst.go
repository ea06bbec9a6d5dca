package main

// One instance of a group variant: its store, locks and handler, and the
// tables it runs on, reset and analysed between contestants.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"

	"github.com/lockreg/lockreg/aggregator"
	"github.com/lockreg/lockreg/groupstore"
	"github.com/lockreg/lockreg/groupstore/sqlstore"
	"github.com/lockreg/lockreg/jdbc"
	"github.com/lockreg/lockreg/jdbc/pgxlisten"
	"github.com/lockreg/lockreg/registry"
	"github.com/lockreg/lockreg/resequencer"
)

// groupLock names the lock that protects the groups of v: "local" (the
// in-process registry of the memory variant), "registry" (the SQL lock
// table's leases) or "store" (the group row's lock in the store's
// transactions: no Locks).
func (cfg config) groupLock(v groupVariant) string {
	if v.server == "memory" {
		return "local"
	}
	return cfg.groupLockKind
}

// groupInst is one instance: its pool, lock registry, store and handler.
type groupInst struct {
	db     *sql.DB
	c      *counter
	reg    *registry.Registry
	handle func(*message.Message) error
}

func (i *groupInst) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := i.reg.Close(ctx)
	if i.db != nil {
		err = errors.Join(err, i.db.Close())
	}
	return err
}

func openGroupInst(e *env, scenario string, v groupVariant, cfg config, pub, disc message.Publisher, errs *atomic.Int64) (*groupInst, error) {
	in := &groupInst{}
	var store groupstore.Store
	logger := benchLogger{e: e, name: scenario + "/" + v.name, errs: errs}
	if v.server == "memory" {
		reg, err := registry.NewLocal()
		if err != nil {
			return nil, err
		}
		store, in.reg = groupstore.NewMemory(), reg
	} else {
		_, pool := v.workers(cfg)
		var (
			db      *sql.DB
			c       *counter
			err     error
			dialect jdbc.Dialect
		)
		switch v.server {
		case "postgres":
			db, c, err = openPgx(e.pgDSN, pool)
			dialect = jdbc.Postgres
		case "mariadb":
			db, c, err = openCounted("mysql", e.myDSN, pool)
			dialect = jdbc.MySQL
		default:
			db, c, err = openCounted("sqlite", e.sqliteDSN, pool)
			dialect = jdbc.SQLite
		}
		if err != nil {
			return nil, err
		}
		in.db, in.c = db, c
		repoOpts := []jdbc.Option{jdbc.WithPrefix(lockregPrefix), jdbc.WithRegion(groupRegion), jdbc.WithClientID(uuid.NewString()),
			jdbc.WithDialect(dialect)}
		if cfg.groupListen && v.server == "postgres" {
			repoOpts = append(repoOpts, jdbc.WithListener(pgxlisten.New(db)))
		}
		repo, err := jdbc.NewLockRepository(context.Background(), db, repoOpts...)
		if err != nil {
			db.Close()
			return nil, err
		}
		in.reg, err = registry.New(repo, registry.WithErrorHandler(func(key string, err error) {
			errs.Add(1)
			e.logf("%s/%s: lock %s: %v", scenario, v.name, key, err)
		}))
		if err != nil {
			db.Close()
			return nil, err
		}
		gs, err := sqlstore.New(db, sqlstore.Config{Prefix: lockregPrefix, Region: groupRegion, Dialect: dialect, GroupCommit: cfg.groupCommit})
		if err != nil {
			in.close()
			return nil, err
		}
		store = gs
	}
	var locks registry.LockRegistry = in.reg
	if cfg.groupLock(v) == "store" {
		locks = nil // the SQL store locks its groups itself
	}
	switch scenario {
	case "aggregator":
		a, err := aggregator.New(aggregator.Config{Publisher: pub, OutputTopic: "bench.aggregated", Store: store, Locks: locks,
			DiscardPublisher: disc, DiscardTopic: "bench.discarded", Logger: logger})
		if err != nil {
			in.close()
			return nil, err
		}
		in.handle = a.Handle
	case "resequencer":
		r, err := resequencer.New(resequencer.Config{Publisher: pub, OutputTopic: "bench.ordered", Store: store, Locks: locks,
			ReleasePartialSequences: reseqPartial, DiscardPublisher: disc, DiscardTopic: "bench.discarded", Logger: logger})
		if err != nil {
			in.close()
			return nil, err
		}
		in.handle = r.Handle
	default:
		return nil, fmt.Errorf("unknown scenario %q", scenario)
	}
	return in, nil
}

// resetGroups empties the group and lock tables of server: on the
// benchmark's PostgreSQL database it also vacuums them and takes a
// checkpoint.
func (e *env) resetGroups(ctx context.Context, server string) error {
	if server != "postgres" {
		db, err := sql.Open(map[string]string{"mariadb": "mysql", "sqlite": "sqlite"}[server],
			map[string]string{"mariadb": e.myDSN, "sqlite": e.sqliteDSN}[server])
		if err != nil {
			return err
		}
		defer db.Close()
		for _, t := range []string{"GROUP", "GROUP_MESSAGE", "LOCK"} {
			if _, err := db.ExecContext(ctx, "DELETE FROM "+lockregPrefix+t); err != nil {
				return fmt.Errorf("emptying %s%s: %w", lockregPrefix, t, err)
			}
		}
		return nil
	}
	db, _, err := openPgx(e.pgDSN, 1)
	if err != nil {
		return err
	}
	defer db.Close()
	var t []string
	for _, s := range []string{"GROUP", "GROUP_MESSAGE", "LOCK", "LOCK_WAIT"} {
		t = append(t, strings.ToLower(lockregPrefix+s))
	}
	tables := strings.Join(t, ", ")
	for _, q := range []string{"TRUNCATE " + tables, "VACUUM (ANALYZE) " + tables, "CHECKPOINT"} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	return nil
}

// analyzeGroups gathers PostgreSQL's statistics of the group tables
// after the warm-up, as autovacuum does on a table that has seen traffic:
// those that resetGroups left describe empty tables, and the statements'
// cached generic plans, made for empty tables, scan whole tables then
// (replanned once the statistics change). Without this the measured
// window's figures were the planner's, not the store's.
func (e *env) analyzeGroups(ctx context.Context) error {
	db, _, err := openPgx(e.pgDSN, 1)
	if err != nil {
		return err
	}
	defer db.Close()
	q := "ANALYZE " + strings.ToLower(lockregPrefix+"GROUP") + ", " + strings.ToLower(lockregPrefix+"GROUP_MESSAGE")
	if _, err := db.ExecContext(ctx, q); err != nil {
		return fmt.Errorf("%s: %w", q, err)
	}
	return nil
}
