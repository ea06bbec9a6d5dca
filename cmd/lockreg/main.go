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

func schemaApply(ctx context.Context, args []string, out io.Writer) error {
	c := newCommand("schema apply", out)
	if _, err := c.parse(args, 0, ""); err != nil {
		return err
	}
	defer c.close()
	// sqlstore's CreateSchema applies jdbc's lock scripts first.
	if err := sqlstore.CreateSchema(ctx, c.db, c.storeConfig()); err != nil {
		return err
	}
	return c.message("schema applied: the lock and group tables with prefix "+c.prefix,
		map[string]any{"applied": true})
}

// tableStatus is one line of schema status.
type tableStatus struct {
	Tables string `json:"tables"`
	OK     bool   `json:"ok"`
	Error  string `json:"error,omitempty"`
}

func schemaStatus(ctx context.Context, args []string, out io.Writer) error {
	c := newCommand("schema status", out)
	if _, err := c.parse(args, 0, ""); err != nil {
		return err
	}
	defer c.close()
	var status []tableStatus
	check := func(tables string, err error) {
		s := tableStatus{Tables: tables, OK: err == nil}
		if err != nil {
			s.Error = err.Error()
		}
		status = append(status, s)
	}
	repo, err := jdbc.NewLockRepository(ctx, c.db, c.lockOptions()...)
	if err == nil {
		err = repo.Check(ctx)
		repo.Close(ctx)
	}
	check(c.prefix+"LOCK", err)
	s, err := c.store()
	if err == nil {
		_, err = s.Groups(ctx, sqlstore.GroupFilter{Limit: 1})
		s.Close(ctx)
	}
	check(c.prefix+"GROUP, "+c.prefix+"GROUP_MESSAGE", err)
	var rows [][]string
	failed := false
	for _, s := range status {
		state := "ok"
		if !s.OK {
			state, failed = s.Error, true
		}
		rows = append(rows, []string{s.Tables, state})
	}
	if err := c.print(status, []string{"TABLES", "STATUS"}, rows); err != nil {
		return err
	}
	if failed {
		return errors.New("schema status: not every table is usable; \"lockreg schema apply\" creates or completes them")
	}
	return nil
}

func (c *command) admin() (*jdbc.Admin, error) {
	return jdbc.NewAdmin(c.db, jdbc.WithDialect(c.dialect), jdbc.WithPrefix(c.prefix))
}

// lease is a lease as the CLI prints it in JSON.
type lease struct {
	Region   string    `json:"region"`
	Key      string    `json:"key"`
	LockKey  string    `json:"lock_key"`
	ClientID string    `json:"client_id"`
	Holder   string    `json:"holder"`
	Held     bool      `json:"held"`
	Created  time.Time `json:"created"`
	Expires  time.Time `json:"expires"`
	Token    int64     `json:"token"`
}

func leaseOf(l jdbc.LeaseInfo) lease {
	return lease{Region: l.Region, Key: l.Name, LockKey: l.LockKey, ClientID: l.ClientID, Holder: l.Holder, Held: l.Held,
		Created: l.Created, Expires: l.Expires, Token: l.Token}
}

var leaseHeader = []string{"REGION", "KEY", "STATE", "HOLDER", "CLIENT", "SINCE", "EXPIRES", "TOKEN"}

func (l lease) row() []string {
	state, key := "expired", l.Key
	if l.Held {
		state = "held"
	}
	if key == "" {
		key = "(" + l.LockKey + ")" // a row Spring wrote
	}
	return []string{l.Region, key, state, l.Holder, l.ClientID, l.Created.Format(time.RFC3339), l.Expires.Format(time.RFC3339Nano),
		fmt.Sprint(l.Token)}
}

func locksList(ctx context.Context, args []string, out io.Writer) error {
	c := newCommand("locks list", out)
	held := c.fs.Bool("held", false, "")
	expired := c.fs.Bool("expired", false, "")
	allRegions := c.fs.Bool("all-regions", false, "")
	namePrefix := c.fs.String("name-prefix", "", "")
	limit := c.fs.Int("limit", 0, "")
	if _, err := c.parse(args, 0, ""); err != nil {
		return err
	}
	defer c.close()
	if *held && *expired {
		return fmt.Errorf("%w: locks list: -held and -expired exclude each other", errUsage)
	}
	f := jdbc.LeaseFilter{Region: c.region, NamePrefix: *namePrefix, Limit: *limit}
	if *allRegions {
		f.Region = ""
	}
	if *held {
		f.State = jdbc.HeldLeases
	} else if *expired {
		f.State = jdbc.ExpiredLeases
	}
	a, err := c.admin()
	if err != nil {
		return err
	}
	ls, err := a.Leases(ctx, f)
	if err != nil {
		return err
	}
	list := make([]lease, 0, len(ls))
	var rows [][]string
	for _, l := range ls {
		list = append(list, leaseOf(l))
		rows = append(rows, leaseOf(l).row())
	}
	return c.print(list, leaseHeader, rows)
}

func locksShow(ctx context.Context, args []string, out io.Writer) error {
	c := newCommand("locks show", out)
	rest, err := c.parse(args, 1, "one KEY")
	if err != nil {
		return err
	}
	defer c.close()
	a, err := c.admin()
	if err != nil {
		return err
	}
	l, ok, err := a.Lease(ctx, c.region, rest[0])
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("no lock row for key %q in region %s", rest[0], c.region)
	}
	return c.print(leaseOf(l), leaseHeader, [][]string{leaseOf(l).row()})
}

func locksRelease(ctx context.Context, args []string, out io.Writer) error {
	c := newCommand("locks release", out)
	force := c.fs.Bool("force", false, "")
	rest, err := c.parse(args, 1, "one KEY")
	if err != nil {
		return err
	}
	defer c.close()
	if !*force {
		return fmt.Errorf("%w: locks release ends a lease its holder still relies on; "+
			"only the fencing token then protects the guarded data: add -force to do it", errUsage)
	}
	a, err := c.admin()
	if err != nil {
		return err
	}
	released, err := a.ForceRelease(ctx, c.region, rest[0])
	if err != nil {
		return err
	}
	if !released {
		return fmt.Errorf("no held lease on key %q in region %s", rest[0], c.region)
	}
	return c.message(fmt.Sprintf("released %q in region %s", rest[0], c.region), map[string]any{"released": true})
}

func locksWaiters(ctx context.Context, args []string, out io.Writer) error {
	c := newCommand("locks waiters", out)
	allRegions := c.fs.Bool("all-regions", false, "")
	if _, err := c.parse(args, 0, ""); err != nil {
		return err
	}
	defer c.close()
	a, err := c.admin()
	if err != nil {
		return err
	}
	region := c.region
	if *allRegions {
		region = ""
	}
	ws, err := a.Waiters(ctx, region)
	if err != nil {
		return err
	}
	type waiter struct {
		Region   string    `json:"region"`
		Key      string    `json:"key"`
		LockKey  string    `json:"lock_key"`
		ClientID string    `json:"client_id"`
		Holder   string    `json:"holder"`
		Since    time.Time `json:"since"`
		Until    time.Time `json:"until"`
	}
	list := make([]waiter, 0, len(ws))
	var rows [][]string
	for _, w := range ws {
		list = append(list, waiter{Region: w.Region, Key: w.Name, LockKey: w.LockKey, ClientID: w.ClientID, Holder: w.Holder, Since: w.Since, Until: w.Until})
		rows = append(rows, []string{w.Region, w.Name, w.Holder, w.ClientID, w.Since.Format(time.RFC3339Nano)})
	}
	return c.print(list, []string{"REGION", "KEY", "WAITER", "CLIENT", "SINCE"}, rows)
}

// group is a message group as the CLI prints it in JSON.
type group struct {
	Key          string     `json:"key"`
	ID           string     `json:"id"`
	Complete     bool       `json:"complete"`
	Size         int        `json:"size"`
	Releases     int64      `json:"releases"`
	Version      int64      `json:"version"`
	Created      time.Time  `json:"created"`
	Updated      time.Time  `json:"updated"`
	Due          *time.Time `json:"due,omitempty"`
	ClaimedUntil *time.Time `json:"claimed_until,omitempty"`
	Messages     []message  `json:"messages,omitempty"`
}

type message struct {
	UUID        string    `json:"uuid"`
	Position    int64     `json:"position"`
	Released    bool      `json:"released"`
	PayloadSize int64     `json:"payload_size"`
	Created     time.Time `json:"created"`
}

func groupOf(g sqlstore.GroupInfo) group {
	out := group{Key: g.Key, ID: g.ID, Complete: g.Complete, Size: g.Size, Releases: g.Releases, Version: g.Version,
		Created: g.Created, Updated: g.Updated}
	if !g.Due.IsZero() {
		out.Due = &g.Due
	}
	if !g.ClaimedUntil.IsZero() {
		out.ClaimedUntil = &g.ClaimedUntil
	}
	return out
}

var groupHeader = []string{"KEY", "STATE", "SIZE", "CREATED", "DUE", "VERSION"}

func (g group) row() []string {
	state, due := "open", ""
	if g.Complete {
		state = "complete"
	}
	if g.Due != nil {
		due = g.Due.Format(time.RFC3339)
	}
	return []string{g.Key, state, fmt.Sprint(g.Size), g.Created.Format(time.RFC3339), due, fmt.Sprint(g.Version)}
}

func groupsList(ctx context.Context, args []string, out io.Writer) error {
	c := newCommand("groups list", out)
	state := c.fs.String("state", "", "")
	olderThan := c.fs.Duration("older-than", 0, "")
	limit := c.fs.Int("limit", 0, "")
	if _, err := c.parse(args, 0, ""); err != nil {
		return err
	}
	defer c.close()
	f := sqlstore.GroupFilter{OlderThan: *olderThan, Limit: *limit}
	switch *state {
	case "":
	case "open":
		f.State = sqlstore.OpenGroups
	case "complete":
		f.State = sqlstore.CompleteGroups
	case "due":
		f.State = sqlstore.DueGroups
	default:
		return fmt.Errorf("%w: groups list: -state %q: want open, complete or due", errUsage, *state)
	}
	s, err := c.store()
	if err != nil {
		return err
	}
	defer s.Close(ctx)
	gs, err := s.Groups(ctx, f)
	if err != nil {
		return err
	}
	list := make([]group, 0, len(gs))
	var rows [][]string
	for _, g := range gs {
		list = append(list, groupOf(g))
		rows = append(rows, groupOf(g).row())
	}
	return c.print(list, groupHeader, rows)
}

func groupsShow(ctx context.Context, args []string, out io.Writer) error {
	c := newCommand("groups show", out)
	rest, err := c.parse(args, 1, "one KEY")
	if err != nil {
		return err
	}
	defer c.close()
	s, err := c.store()
	if err != nil {
		return err
	}
	defer s.Close(ctx)
	g, msgs, err := s.Inspect(ctx, rest[0])
	if err != nil {
		return err
	}
	out2 := groupOf(g)
	rows := [][]string{}
	for _, m := range msgs {
		out2.Messages = append(out2.Messages, message(m))
		state := "held"
		if m.Released {
			state = "released"
		}
		rows = append(rows, []string{fmt.Sprint(m.Position), m.UUID, state, fmt.Sprint(m.PayloadSize), m.Created.Format(time.RFC3339Nano)})
	}
	if c.json {
		return c.print(out2, nil, nil)
	}
	if err := c.print(nil, groupHeader, [][]string{out2.row()}); err != nil {
		return err
	}
	fmt.Fprintln(c.out)
	return c.print(nil, []string{"POSITION", "MESSAGE", "STATE", "PAYLOAD BYTES", "ADDED"}, rows)
}

func groupsExpire(ctx context.Context, args []string, out io.Writer) error {
	c := newCommand("groups expire", out)
	rest, err := c.parse(args, 1, "one KEY")
	if err != nil {
		return err
	}
	defer c.close()
	s, err := c.store()
	if err != nil {
		return err
	}
	defer s.Close(ctx)
	if err := s.Expire(ctx, rest[0]); err != nil {
		return err
	}
	return c.message(fmt.Sprintf("group %q is due: the next pass of a handler's timeout runner expires it", rest[0]),
		map[string]any{"expired": true})
}

func groupsDelete(ctx context.Context, args []string, out io.Writer) error {
	c := newCommand("groups delete", out)
	force := c.fs.Bool("force", false, "")
	rest, err := c.parse(args, 1, "one KEY")
	if err != nil {
		return err
	}
	defer c.close()
	if !*force {
		return fmt.Errorf("%w: groups delete drops the group's messages unreleased: add -force to do it", errUsage)
	}
	s, err := c.store()
	if err != nil {
		return err
	}
	defer s.Close(ctx)
	if err := s.Remove(ctx, rest[0], 0); err != nil {
		return err
	}
	return c.message(fmt.Sprintf("deleted group %q", rest[0]), map[string]any{"deleted": true})
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
