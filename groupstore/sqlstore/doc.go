// Package sqlstore keeps the message groups of lockreg's aggregator and
// resequencer (a [groupstore.Store]) in SQL tables on PostgreSQL,
// MySQL/MariaDB and SQLite: INT_GROUP and INT_GROUP_MESSAGE, beside the
// lock table of package [github.com/lockreg/lockreg/jdbc], with the same
// prefix and region settings. [Outbox] adds publishing in the store's
// transactions, so that a release and its output commit together: with a
// watermill-sql publisher on the same database, exactly once into the
// output topic. This package is where Watermill enters; package jdbc, for
// locks alone, links neither Watermill nor a driver its user did not
// choose.
//
//	if err := sqlstore.CreateSchema(ctx, db, sqlstore.Config{}); err != nil { ... }
//	store, err := sqlstore.New(db, sqlstore.Config{Region: "orders"})
//	...
//	defer store.Close(ctx)
//
// # Clean-up
//
// Completed groups stay in the tables, with a row per message UUID, so that
// redeliveries are recognised. A Store deletes the finished ones in the
// background after a retention, 7 days by default (see
// Config.CleanupRetention); one store of the tables and region does the
// work per interval (1 h), under a lease in the lock table, and the others
// skip. Open groups and groups with a pending timeout are never deleted.
// Within the retention a redelivered message is still recognised; after
// it, it starts a new group. Config.DisableCleanup turns it off;
// Store.DeleteCompleted cleans on demand.
//
// # Errors
//
// Failures that may pass on retry satisfy errors.Is(err,
// registry.ErrTransient), told apart as package jdbc's are; missing tables
// are reported as ErrNoTable, and an operation whose context is done
// returns an error wrapping ctx.Err().
package sqlstore
