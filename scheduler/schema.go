package scheduler

import (
	"context"
	"database/sql"
	"io/fs"
	"regexp"
	"strings"

	lockregsql "github.com/lockreg/lockreg/sql"
)

// script is the name of the table's script in package sql's folders.
const script = "000007_scheduled_tasks.up.sql"

var (
	defaultTableWord = regexp.MustCompile(`\bscheduled_tasks\b`)
	indexName        = regexp.MustCompile(`\b(execution_time_idx|last_heartbeat_idx|priority_execution_time_idx)\b`)
)

// CreateSchema creates the table of cfg (Table, Dialect) if it is missing,
// with db-scheduler's DDL for the dialect: the script 000007_scheduled_tasks
// of package github.com/lockreg/lockreg/sql, which migration tools apply as
// well. It adds nothing db-scheduler's Java nodes would notice. A table
// other than the default gets index names prefixed with its own, so that
// two tables in one schema do not share PostgreSQL's index namespace. An
// existing table is left as it is. Concurrent calls from many replicas take
// turns under the dialect's schema lock, as jdbc.CreateSchema's do.
func CreateSchema(ctx context.Context, db *sql.DB, cfg Config) error {
	s, err := cfg.settle(db, false)
	if err != nil {
		return err
	}
	b, err := fs.ReadFile(lockregsql.FS, s.d.Name+"/"+script)
	if err != nil {
		return err
	}
	text := string(b)
	if s.Table != DefaultTable {
		base := s.Table[strings.LastIndexByte(s.Table, '.')+1:]
		text = indexName.ReplaceAllString(text, base+"_$1")
		text = defaultTableWord.ReplaceAllLiteralString(text, s.Table)
	}
	var statements []string
	for _, st := range strings.Split(text, ";\n") {
		var lines []string
		for _, l := range strings.Split(st, "\n") {
			if !strings.HasPrefix(strings.TrimSpace(l), "--") {
				lines = append(lines, l)
			}
		}
		if st := strings.TrimSpace(strings.Join(lines, "\n")); st != "" {
			statements = append(statements, st)
		}
	}
	if err := s.d.ApplyDDL(ctx, db, "lockreg.scheduler:"+strings.ToLower(s.Table), "scheduler.CreateSchema", statements...); err != nil {
		return s.wrap(ctx, db, "scheduler: create schema", err)
	}
	return nil
}
