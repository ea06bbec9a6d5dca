package tooltest

import (
	"context"
	"database/sql"
	"slices"
	"testing"

	"github.com/golang-migrate/migrate/v4"
	"github.com/golang-migrate/migrate/v4/database"
	migratemysql "github.com/golang-migrate/migrate/v4/database/mysql"
	migratepgx "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	migratepq "github.com/golang-migrate/migrate/v4/database/postgres"
	migratesqlite "github.com/golang-migrate/migrate/v4/database/sqlite"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/pressly/goose/v3"

	"github.com/lockreg/lockreg/groupstore/sqlstore"
	"github.com/lockreg/lockreg/jdbc"
	lockregsql "github.com/lockreg/lockreg/sql"
)

// migrator is one migration tool on one database: up to the newest
// version, down to a version (0: all the way).
type migrator struct {
	up     func() error
	downTo func(version int) error
}

// gooseOn runs goose's Provider on db with lockregsql.Goose's files.
func gooseOn(t *testing.T, f freshDB, db *sql.DB) migrator {
	t.Helper()
	fsys, err := lockregsql.Goose(string(f.dialect))
	if err != nil {
		t.Fatal(err)
	}
	dialect := map[jdbc.Dialect]goose.Dialect{
		jdbc.Postgres: goose.DialectPostgres, jdbc.MySQL: goose.DialectMySQL, jdbc.SQLite: goose.DialectSQLite3,
	}[f.dialect]
	p, err := goose.NewProvider(dialect, db, fsys)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	return migrator{
		up: func() error { _, err := p.Up(ctx); return err },
		downTo: func(v int) error {
			_, err := p.DownTo(ctx, int64(v))
			return err
		},
	}
}

// golangMigrateOn runs golang-migrate with source/iofs on lockregsql.FS and
// the database driver named (pgx5 or postgres on PostgreSQL). It opens a
// pool of its own, which golang-migrate closes.
func golangMigrateOn(t *testing.T, f freshDB, driverName string) migrator {
	t.Helper()
	src, err := iofs.New(lockregsql.FS, string(f.dialect))
	if err != nil {
		t.Fatal(err)
	}
	var drv database.Driver
	switch driverName {
	case "pgx5":
		drv, err = migratepgx.WithInstance(f.open(t, "pgx"), &migratepgx.Config{})
	case "postgres":
		drv, err = migratepq.WithInstance(f.open(t, "postgres"), &migratepq.Config{})
	case "mysql": // golang-migrate sends a script as one query
		drv, err = migratemysql.WithInstance(f.open(t, "mysql", "multiStatements=true"), &migratemysql.Config{})
	case "sqlite": // modernc.org/sqlite, pure Go, as lockreg's default
		drv, err = migratesqlite.WithInstance(f.open(t, "sqlite"), &migratesqlite.Config{})
	}
	if err != nil {
		t.Fatal(err)
	}
	m, err := migrate.NewWithInstance("iofs", src, driverName, drv)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return migrator{
		up: m.Up,
		downTo: func(v int) error {
			if v == 0 {
				return m.Down()
			}
			return m.Migrate(uint(v))
		},
	}
}

// golangMigrateDrivers are golang-migrate's database drivers per dialect.
var golangMigrateDrivers = map[jdbc.Dialect][]string{
	jdbc.Postgres: {"pgx5", "postgres"},
	jdbc.MySQL:    {"mysql"},
	jdbc.SQLite:   {"sqlite"},
}

// upAndDownTwiceOnAnEmptyDatabase: up makes the schema lockreg works on,
// down removes every table, twice.
func upAndDownTwiceOnAnEmptyDatabase(t *testing.T, f freshDB, db *sql.DB, m migrator) {
	for round := range 2 {
		if err := m.up(); err != nil {
			t.Fatalf("round %d: up: %v", round, err)
		}
		wantLockregWorks(t, f, db)
		if err := m.downTo(0); err != nil {
			t.Fatalf("round %d: down: %v", round, err)
		}
		if got := tables(t, f, db); len(got) > 0 {
			t.Fatalf("round %d: after down, tables %v remain", round, got)
		}
	}
}

// upAndDownTwiceOnASpring7Table: up completes Spring 7's INT_LOCK for
// lockreg, keeping Spring's rows and statements working; down to version 1
// leaves it as Spring made it, rows and all, twice.
func upAndDownTwiceOnASpring7Table(t *testing.T, f freshDB, db *sql.DB, m migrator) {
	springTable(t, f, db)
	for round := range 2 {
		if err := m.up(); err != nil {
			t.Fatalf("round %d: up: %v", round, err)
		}
		wantLockregWorks(t, f, db)
		insertSpringRow(t, f, db, "spring-key-"+randomHex(4)) // Spring's INSERT names no FENCE
		if err := m.downTo(1); err != nil {
			t.Fatalf("round %d: down to 1: %v", round, err)
		}
		if got := columns(t, f, db, "INT_LOCK"); !slices.Equal(got, springColumns) {
			t.Fatalf("round %d: after down to 1, INT_LOCK has %v, want Spring 7's %v", round, got, springColumns)
		}
		if got := tables(t, f, db); !slices.Equal(got, []string{"int_lock"}) {
			t.Fatalf("round %d: after down to 1, tables %v, want only int_lock", round, got)
		}
		if n := springRows(t, db); n != round+2 {
			t.Fatalf("round %d: %d Spring rows, want %d", round, n, round+2)
		}
	}
}

func TestGooseUpAndDownTwiceOnAnEmptyDatabase(t *testing.T) {
	forEachServer(t, func(t *testing.T, s server) {
		f := fresh(t, s)
		db := f.open(t, "")
		upAndDownTwiceOnAnEmptyDatabase(t, f, db, gooseOn(t, f, db))
	})
}

func TestGooseUpAndDownTwiceOnASpring7LockTable(t *testing.T) {
	forEachServer(t, func(t *testing.T, s server) {
		f := fresh(t, s)
		db := f.open(t, "")
		upAndDownTwiceOnASpring7Table(t, f, db, gooseOn(t, f, db))
	})
}

func TestGolangMigrateUpAndDownTwiceOnAnEmptyDatabase(t *testing.T) {
	forEachServer(t, func(t *testing.T, s server) {
		for _, d := range golangMigrateDrivers[s.dialect] {
			t.Run(d, func(t *testing.T) {
				f := fresh(t, s)
				upAndDownTwiceOnAnEmptyDatabase(t, f, f.open(t, ""), golangMigrateOn(t, f, d))
			})
		}
	})
}

func TestGolangMigrateUpAndDownTwiceOnASpring7LockTable(t *testing.T) {
	forEachServer(t, func(t *testing.T, s server) {
		for _, d := range golangMigrateDrivers[s.dialect] {
			t.Run(d, func(t *testing.T) {
				f := fresh(t, s)
				upAndDownTwiceOnASpring7Table(t, f, f.open(t, ""), golangMigrateOn(t, f, d))
			})
		}
	})
}

// On PostgreSQL and MySQL/MariaDB the scripts are idempotent: a database
// that CreateSchema set up (sqlstore's, which makes the lock and the group
// tables) can be handed to goose, whose up then runs every script again over
// the existing tables.
// (On SQLite, ALTER TABLE ... ADD FENCE in sqlite/000002 is not idempotent,
// as package sql documents: the test does not apply there.)
func TestGooseUpRunsOverTablesCreateSchemaMade(t *testing.T) {
	forEachServerWhere(t, func(s server) bool { return s.dialect != jdbc.SQLite }, func(t *testing.T, s server) {
		f := fresh(t, s)
		db := f.open(t, "")
		if err := sqlstore.CreateSchema(context.Background(), db, sqlstore.Config{}); err != nil {
			t.Fatal(err)
		}
		if err := gooseOn(t, f, db).up(); err != nil {
			t.Fatalf("goose up over CreateSchema's tables: %v", err)
		}
		wantLockregWorks(t, f, db)
	})
}
