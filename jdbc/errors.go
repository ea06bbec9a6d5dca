package jdbc

import (
	"context"
	"errors"
	"fmt"

	"github.com/lockreg/lockreg/internal/dialect"
	"github.com/lockreg/lockreg/registry"
)

var (
	// ErrNoTable reports that the lock table does not exist. The returned
	// error wraps it, names the table (with its prefix) and says how to
	// create it.
	ErrNoTable = errors.New("jdbc: lock table missing")

	// ErrInvalidOption reports an invalid option value (or an invalid result
	// of the WithKeyMapping function). The returned error wraps it and names
	// the option.
	ErrInvalidOption = errors.New("jdbc: invalid option")

	// ErrUnknownDialect reports a database whose driver jdbc does not
	// recognise when no WithDialect option is given.
	ErrUnknownDialect = errors.New("jdbc: unknown dialect")

	// ErrClientFoundRows reports a MySQL database whose connections count
	// the rows a statement found rather than those it changed
	// (clientFoundRows=true in the go-sql-driver/mysql DSN), with which a
	// custom acquire query could not tell a lock taken from one held
	// elsewhere. The returned error wraps it and says what to change.
	ErrClientFoundRows = errors.New("jdbc: MySQL connections count found rows, not changed ones")
)

// wrap gives a database error its context (what, as made by opKey) and
// classification: an error wrapping ctx.Err() when ctx is done, a transient
// error, an error wrapping ErrNoTable, or err as it is.
func (r *LockRepository) wrap(ctx context.Context, what string, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		if errors.Is(err, ctxErr) {
			return fmt.Errorf("%s: %w", what, err)
		}
		return fmt.Errorf("%s: %w: %w", what, ctxErr, err)
	}
	if dialect.IsTransient(err) {
		return registry.Transient(fmt.Errorf("%s: %w", what, err))
	}
	if r.cfg.d.IsNoTable(ctx, r.db, err, r.cfg.table) {
		return fmt.Errorf("%s: %w", what, r.noTable(err))
	}
	return fmt.Errorf("%s: %w", what, err)
}

// opKey describes operation op on a caller's key for error messages.
func opKey(op, key string) string { return "jdbc: " + op + " " + dialect.Quote(key) }

func (r *LockRepository) noTable(err error) error {
	table := "table " + r.cfg.table
	if r.queue != nil { // the statement may have missed either
		table += " or its waiter queue " + r.cfg.table + "_WAIT"
	}
	return fmt.Errorf("%w: %s does not exist; create it with jdbc.CreateSchema or the scripts in lockreg's sql/%s folder: %w",
		ErrNoTable, table, r.cfg.d.Name, err)
}
