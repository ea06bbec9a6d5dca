package sqlstore

import (
	"context"
	"errors"

	"github.com/lockreg/lockreg/internal/dialect"
	"github.com/lockreg/lockreg/jdbc"
)

// CreateSchema creates the group tables INT_GROUP and INT_GROUP_MESSAGE for
// the dialect of db, with the prefix cfg configures, and the lock table that
// the clean-up takes its lease in, as jdbc.CreateSchema does (which it
// calls first). It executes the message-group scripts embedded in package
// [github.com/lockreg/lockreg/sql] for the dialect (000003_message_group,
// and whatever later group scripts add), each statement on its own, with
// INT_ replaced by the prefix, under the same turn-taking as
// jdbc.CreateSchema: any number of processes may call it at once. It creates
// what is missing and leaves the rest, so it may run at every start. Of cfg
// it uses Dialect and Prefix and checks the rest; it returns the errors of
// New for a bad cfg and jdbc.CreateSchema's for the lock table.
func CreateSchema(ctx context.Context, db jdbc.DB, cfg Config) error {
	if db == nil || dialect.IsNil(db) {
		return errors.New("sqlstore: nil database")
	}
	cfg.setDefaults()
	d, err := cfg.validate(db)
	if err != nil {
		return err
	}
	if err := jdbc.CreateSchema(ctx, db, cfg.lockOptions(d)...); err != nil {
		return err
	}
	if err := d.ApplyScripts(ctx, db, cfg.Prefix, dialect.GroupScripts); err != nil {
		return wrap(ctx, d, db, cfg.Prefix+"GROUP", cfg.Prefix+"GROUP_MESSAGE", "sqlstore: create schema", err)
	}
	return nil
}
