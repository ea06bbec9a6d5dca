package shedlock

import (
	"context"

	"github.com/lockreg/lockreg/jdbc"
)

// CreateSchema creates the ShedLock table of cfg (Table, Dialect) if it is
// missing, with ShedLock's own DDL for the dialect: on PostgreSQL name
// VARCHAR(64) PRIMARY KEY, lock_until, locked_at TIMESTAMP and locked_by
// VARCHAR(255), all NOT NULL; on MySQL/MariaDB the same with TIMESTAMP(3)
// and locked_at DEFAULT CURRENT_TIMESTAMP(3). On SQLite, which ShedLock
// does not support, the times are TEXT in the format the statements write.
// An existing table is left as it is. Concurrent calls take turns as
// jdbc.CreateSchema's do. It returns the errors of NewRepository's checks
// of cfg.
func CreateSchema(ctx context.Context, db jdbc.DB, cfg Config) error {
	s, err := cfg.settle(db)
	if err != nil {
		return err
	}
	err = s.d.ApplyDDL(ctx, db, "lockreg.shedlock:"+s.Table, "shedlock.CreateSchema", ddl(s.d.Name, s.Table))
	if err != nil {
		r := &Repository{db: db, cfg: s}
		return r.wrap(ctx, "shedlock: create schema", err)
	}
	return nil
}
