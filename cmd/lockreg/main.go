// Command lockreg inspects and maintains lockreg's tables: it creates or
// completes the schema, lists and shows the leases of the lock table (who
// holds what, since when, on which host), force-releases a lease, lists
// PostgreSQL's waiters, lists, shows, expires and deletes the message groups
// of groupstore/sqlstore, lists, shows, reschedules and cancels the
// executions of package scheduler's table, and deletes expired rows.
//
// Install it with
//
//	go install github.com/lockreg/lockreg/cmd/lockreg@latest
//
// Run "lockreg help" for the commands and flags. The database comes from
// -dsn or the environment variable LOCKREG_DSN, and its form picks the
// dialect: a postgres:// or postgresql:// URL is PostgreSQL (pgx), a
// go-sql-driver/mysql DSN (user:password@tcp(host:3306)/db, or the same after
// mysql://) is MySQL or MariaDB, and anything else is a SQLite database file
// (a path, or a file: URI). Output is a table for people, or JSON with
// -json. Errors go to standard error; the exit status is 1 for a failure, 2
// for a usage error.
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"text/tabwriter"
	"time"

	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"
	_ "modernc.org/sqlite"

	"github.com/lockreg/lockreg/groupstore/sqlstore"
	"github.com/lockreg/lockreg/jdbc"
)

const usage = `lockreg: inspect and maintain lockreg's tables

Usage:
  lockreg schema apply               create or complete the lock, queue and group tables
  lockreg schema status              check that the tables exist with lockreg's layout
  lockreg locks list [-held|-expired] [-name-prefix P] [-all-regions] [-limit N]
  lockreg locks show KEY             one lease, by the key as the application wrote it
  lockreg locks release -force KEY   end a lease, whoever holds it (dangerous, see below)
  lockreg locks waiters              PostgreSQL's waiter queue, in serving order
  lockreg groups list [-state open|complete|due] [-older-than D] [-limit N]
  lockreg groups show KEY            one message group and its messages
  lockreg groups expire KEY          make a group due now: the handler's timeout runner expires it
  lockreg groups delete -force KEY   delete a group and its messages
  lockreg tasks list [-task NAME] [-state all|due|picked|failing|waiting] [-limit N]
  lockreg tasks show TASK INSTANCE   one execution of the scheduler's table, with its task_data
  lockreg tasks reschedule (-at RFC3339|-in D) TASK INSTANCE  move an unpicked execution; it keeps its data
  lockreg tasks cancel -force TASK INSTANCE  delete an unpicked execution
  lockreg cleanup [-groups-older-than D]  delete expired lock rows and finished groups

Flags of every command:
  -dsn DSN      the database (default: $LOCKREG_DSN)
  -region R     the region (default DEFAULT, Spring Integration's)
  -prefix P     the table prefix (default INT_)
  -json         print JSON instead of a table
and of the tasks commands:
  -table T      the scheduler's table (default scheduled_tasks)
  -time-zone Z  MySQL/MariaDB: the zone of its DATETIME times (default UTC)

The DSN picks the dialect: a postgres:// or postgresql:// URL is PostgreSQL,
a go-sql-driver/mysql DSN (user:password@tcp(host:3306)/db, or mysql://
followed by one) is MySQL or MariaDB, anything else is a SQLite file path
(or a file: URI).

"locks release" does not tell the holder: it goes on working until its next
renewal fails, while another client may take the lock; only the fencing
token still protects the guarded data. Use it for holders known to be dead.
"tasks reschedule" and "tasks cancel" refuse a picked execution: a scheduler
is running it and would write its completion over the change.

Exit status: 0 on success, 1 on failure, 2 on a usage error.
`

// errUsage marks a usage error (exit status 2).
var errUsage = errors.New("usage")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run runs the command args and returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	err := dispatch(ctx, args, stdout)
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(stdout, usage)
		return 0
	case errors.Is(err, errUsage):
		fmt.Fprintf(stderr, "lockreg: %v\nRun \"lockreg help\" for usage.\n", err)
		return 2
	}
	fmt.Fprintf(stderr, "lockreg: %v\n", err)
	return 1
}

// command is the parsed command line of one command.
type command struct {
	fs                  *flag.FlagSet
	dsn, region, prefix string
	json                bool
	out                 io.Writer
	db                  *sql.DB
	dialect             jdbc.Dialect
}

func newCommand(name string, out io.Writer) *command {
	c := &command{fs: flag.NewFlagSet(name, flag.ContinueOnError), out: out}
	c.fs.SetOutput(io.Discard)
	c.fs.StringVar(&c.dsn, "dsn", os.Getenv("LOCKREG_DSN"), "")
	c.fs.StringVar(&c.region, "region", "DEFAULT", "")
	c.fs.StringVar(&c.prefix, "prefix", "INT_", "")
	c.fs.BoolVar(&c.json, "json", false, "")
	return c
}

// parse parses args, which must leave n positional arguments, and opens
// the database.
func (c *command) parse(args []string, n int, names string) ([]string, error) {
	if err := c.fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %s: %v", errUsage, c.fs.Name(), err)
	}
	if c.fs.NArg() != n {
		if n == 0 {
			return nil, fmt.Errorf("%w: %s takes no arguments, got %q", errUsage, c.fs.Name(), c.fs.Args())
		}
		return nil, fmt.Errorf("%w: %s takes %s (flags first)", errUsage, c.fs.Name(), names)
	}
	if c.dsn == "" {
		return nil, fmt.Errorf("%w: no database: set -dsn or LOCKREG_DSN", errUsage)
	}
	driver, dsn, dialect := openArgs(c.dsn)
	db, err := sql.Open(driver, dsn)
	if err != nil {
		return nil, fmt.Errorf("opening the %s database: %w", dialect, err)
	}
	c.db, c.dialect = db, dialect
	return c.fs.Args(), nil
}

// openArgs picks the driver and dialect from the form of dsn (see the
// package doc).
func openArgs(dsn string) (driver, source string, d jdbc.Dialect) {
	switch {
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"):
		return "pgx", dsn, jdbc.Postgres
	case strings.HasPrefix(dsn, "mysql://"):
		return "mysql", strings.TrimPrefix(dsn, "mysql://"), jdbc.MySQL
	case strings.Contains(dsn, "@tcp(") || strings.Contains(dsn, "@unix("):
		return "mysql", dsn, jdbc.MySQL
	}
	return "sqlite", dsn, jdbc.SQLite
}

func (c *command) close() {
	if c.db != nil {
		c.db.Close()
	}
}

func (c *command) lockOptions() []jdbc.Option {
	return []jdbc.Option{jdbc.WithDialect(c.dialect), jdbc.WithPrefix(c.prefix), jdbc.WithRegion(c.region), jdbc.WithoutCleanup()}
}

func (c *command) store() (*sqlstore.Store, error) {
	return sqlstore.New(c.db, c.storeConfig())
}

func (c *command) storeConfig() sqlstore.Config {
	return sqlstore.Config{Dialect: c.dialect, Prefix: c.prefix, Region: c.region, DisableCleanup: true}
}

// print writes v as JSON with -json, and otherwise the rows of a table
// with the header.
func (c *command) print(v any, header []string, rows [][]string) error {
	if c.json {
		e := json.NewEncoder(c.out)
		e.SetIndent("", "  ")
		return e.Encode(v)
	}
	w := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, strings.Join(header, "\t"))
	for _, r := range rows {
		fmt.Fprintln(w, strings.Join(r, "\t"))
	}
	return w.Flush()
}

// message writes a line for people, or {"key": value} with -json.
func (c *command) message(text string, v any) error {
	if c.json {
		return json.NewEncoder(c.out).Encode(v)
	}
	_, err := fmt.Fprintln(c.out, text)
	return err
}

func dispatch(ctx context.Context, args []string, out io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: no command", errUsage)
	}
	group, args := args[0], args[1:]
	if group == "help" || group == "-h" || group == "-help" || group == "--help" {
		return flag.ErrHelp
	}
	if group == "cleanup" {
		return cleanup(ctx, args, out)
	}
	if len(args) == 0 {
		return fmt.Errorf("%w: %s needs a subcommand", errUsage, group)
	}
	sub, args := args[0], args[1:]
	f, ok := commands[group+" "+sub]
	if !ok {
		return fmt.Errorf("%w: unknown command %q", errUsage, group+" "+sub)
	}
	return f(ctx, args, out)
}

var commands = map[string]func(ctx context.Context, args []string, out io.Writer) error{
	"schema apply":  schemaApply,
	"schema status": schemaStatus,
	"locks list":    locksList,
	"locks show":    locksShow,
	"locks release": locksRelease,
	"locks waiters": locksWaiters,
	"groups list":   groupsList,
	"groups show":   groupsShow,
	"groups expire": groupsExpire,
	"groups delete": groupsDelete,

	"tasks list":       tasksList,
	"tasks show":       tasksShow,
	"tasks reschedule": tasksReschedule,
	"tasks cancel":     tasksCancel,
}

func cleanup(ctx context.Context, args []string, out io.Writer) error {
	c := newCommand("cleanup", out)
	olderThan := c.fs.Duration("groups-older-than", 24*time.Hour, "")
	if _, err := c.parse(args, 0, ""); err != nil {
		return err
	}
	defer c.close()
	repo, err := jdbc.NewLockRepository(ctx, c.db, c.lockOptions()...)
	if err != nil {
		return err
	}
	locks, err := repo.DeleteExpired(ctx)
	repo.Close(ctx)
	if err != nil {
		return err
	}
	s, err := c.store()
	if err != nil {
		return err
	}
	defer s.Close(ctx)
	groups, err := s.DeleteCompleted(ctx, *olderThan)
	if errors.Is(err, sqlstore.ErrNoTable) {
		groups, err = 0, nil // a database with locks only
	}
	if err != nil {
		return err
	}
	return c.message(fmt.Sprintf("deleted %d expired lock rows and %d finished groups in region %s", locks, groups, c.region),
		map[string]any{"lock_rows": locks, "groups": groups})
}
