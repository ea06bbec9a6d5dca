package jdbc

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"reflect"
)

// pgxStdlib is the package of pgx's database/sql driver, told by name so
// that package jdbc imports no driver.
const pgxStdlib = "github.com/jackc/pgx/v5/stdlib"

// connDB is a pool whose connections can be borrowed (*sql.DB).
type connDB interface {
	Conn(ctx context.Context) (*sql.Conn, error)
}

// directPool returns db as a connDB when one-row queries may skip
// database/sql's rows: db is a *sql.DB itself, not a wrapper whose query
// methods (tracing, counting) the direct path would pass by, and its driver
// is pgx's, which takes the arguments database/sql would pass it
// unconverted (it checks none) and caches its statements per connection, so
// a query by its text is one round trip as a prepared one is. Otherwise it
// returns nil.
func directPool(db DB) connDB {
	c, ok := db.(*sql.DB)
	if !ok {
		return nil
	}
	t := reflect.TypeOf(db.Driver())
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || t.PkgPath() != pgxStdlib {
		return nil
	}
	return c
}

// maxBadConn is how many connections a direct query tries that the driver
// reports unusable before sending anything (driver.ErrBadConn), as
// database/sql's own retries do.
const maxBadConn = 3

// scanDirect runs the one-row query q on a connection of pool through the
// driver connection itself and scans the row's integers into dest,
// reporting false when there is no row. database/sql's QueryRowContext
// starts a goroutine per query whose context can end (Rows.awaitDone), and
// every registry statement has such a context, its TTL bound: measured on 2
// cores, that goroutine's wake-ups cost about 20 µs and a futex call per
// acquisition. The driver watches the context itself, without a goroutine.
func scanDirect(ctx context.Context, pool connDB, q string, args []any, dest []*int64) (found bool, err error) {
	named := make([]driver.NamedValue, len(args))
	for i, a := range args {
		named[i] = driver.NamedValue{Ordinal: i + 1, Value: a}
	}
	for try := 1; ; try++ {
		found, err = scanConn(ctx, pool, q, named, dest)
		if !errors.Is(err, driver.ErrBadConn) || try == maxBadConn || ctx.Err() != nil {
			return found, err
		}
	}
}

func scanConn(ctx context.Context, pool connDB, q string, named []driver.NamedValue, dest []*int64) (found bool, err error) {
	c, err := pool.Conn(ctx)
	if err != nil {
		return false, err
	}
	defer c.Close()
	err = c.Raw(func(dc any) error {
		qc, ok := dc.(driver.QueryerContext)
		if !ok {
			return fmt.Errorf("jdbc: driver connection %T cannot query", dc)
		}
		rows, err := qc.QueryContext(ctx, q, named)
		if err != nil {
			return err
		}
		vals := make([]driver.Value, len(rows.Columns()))
		switch err := rows.Next(vals); {
		case errors.Is(err, io.EOF):
			return rows.Close()
		case err != nil:
			rows.Close()
			return err
		}
		if len(vals) != len(dest) {
			rows.Close()
			return fmt.Errorf("jdbc: the query returned %d columns, want %d", len(vals), len(dest))
		}
		for i, v := range vals {
			n, ok := v.(int64)
			if !ok {
				rows.Close()
				return fmt.Errorf("jdbc: column %d of the query is %T, want an integer", i+1, v)
			}
			*dest[i] = n
		}
		found = true
		// Closing reads the rest of the reply: a statement's error after
		// its first row (a failed commit) is reported here.
		return rows.Close()
	})
	if err != nil {
		return false, err
	}
	return found, nil
}
