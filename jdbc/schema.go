package jdbc

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"slices"
	"strings"

	lockregsql "github.com/lockreg/lockreg/sql"
)

// scriptPrefix matches the default table prefix in the embedded scripts.
var scriptPrefix = regexp.MustCompile(`\bINT_`)

// CreateSchema creates the lock table (and whatever later scripts add) for
// the dialect of db, with the prefix WithPrefix configures: it executes the
// scripts embedded in package [github.com/lockreg/lockreg/sql] for the
// dialect, in name order, each statement on its own, with INT_ replaced by
// the prefix. It is idempotent (every statement is CREATE ... IF NOT EXISTS),
// so it may run at every start; it costs one round trip per statement. Of the
// options it uses WithPrefix and WithDialect and checks the rest.
//
// On PostgreSQL, two CreateSchema calls racing to create the same table can
// make one fail with a duplicate error; CreateSchema retries such a
// statement once.
func CreateSchema(ctx context.Context, db DB, opts ...Option) error {
	cfg, err := newConfig(db, opts)
	if err != nil {
		return err
	}
	names, err := fs.Glob(lockregsql.FS, string(cfg.dialect)+"/*.up.sql")
	if err != nil {
		return fmt.Errorf("jdbc: create schema: %w", err)
	}
	slices.Sort(names)
	r := &LockRepository{db: db, cfg: cfg} // for error classification
	for _, name := range names {
		b, err := fs.ReadFile(lockregsql.FS, name)
		if err != nil {
			return fmt.Errorf("jdbc: create schema: %w", err)
		}
		script := scriptPrefix.ReplaceAllLiteralString(string(b), cfg.prefix)
		for _, s := range statements(script) {
			if exists, err := columnExists(ctx, db, s); err != nil {
				return r.wrap(ctx, "jdbc: create schema: "+name, err)
			} else if exists {
				continue
			}
			_, err := db.ExecContext(ctx, s)
			if err != nil && cfg.dialect == Postgres && isDuplicateObject(err) && ctx.Err() == nil {
				_, err = db.ExecContext(ctx, s)
			}
			if err != nil {
				return r.wrap(ctx, "jdbc: create schema: "+name, err)
			}
		}
	}
	return nil
}

// addColumn matches the scripts' statements that add a column.
var addColumn = regexp.MustCompile(`(?i)^ALTER\s+TABLE\s+(\w+)\s+ADD\s+(?:COLUMN\s+)?(\w+)\s`)

// columnExists reports whether statement adds a column that already exists:
// not every database has ADD COLUMN IF NOT EXISTS. The probe reads no rows;
// any failure of it means the column (or its table) is missing, and the
// statement itself then reports what is wrong.
func columnExists(ctx context.Context, db DB, statement string) (bool, error) {
	m := addColumn.FindStringSubmatch(statement)
	if m == nil {
		return false, nil
	}
	rows, err := db.QueryContext(ctx, "SELECT "+m[2]+" FROM "+m[1]+" WHERE 1 = 0")
	if err != nil {
		return false, ctx.Err()
	}
	rows.Close()
	return true, nil
}

// statements splits a script into statements: it drops "--" comment lines
// and splits at semicolons, which the scripts use only to end statements.
func statements(script string) []string {
	var b strings.Builder
	for line := range strings.Lines(script) {
		if !strings.HasPrefix(strings.TrimSpace(line), "--") {
			b.WriteString(line)
		}
	}
	var out []string
	for s := range strings.SplitSeq(b.String(), ";") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// isDuplicateObject reports a PostgreSQL unique_violation (from the
// catalogs) or duplicate_table/duplicate_object, which CREATE ... IF NOT
// EXISTS raises when it races with itself.
func isDuplicateObject(err error) bool {
	var st sqlState
	if !errors.As(err, &st) {
		return false
	}
	switch st.SQLState() {
	case "23505", "42P07", "42710":
		return true
	}
	return false
}
