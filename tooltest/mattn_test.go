package tooltest

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
	"time"

	_ "github.com/mattn/go-sqlite3"
	"go.uber.org/goleak"

	"github.com/lockreg/lockreg/jdbc"
	"github.com/lockreg/lockreg/registry"
)

// mattn/go-sqlite3 (cgo) is a SQLite driver jdbc recognises; its busy and
// locked databases must count as transient, as modernc.org/sqlite's do.

// openMattn opens a fresh SQLite file through mattn/go-sqlite3 with the
// lock table, and with no busy timeout, so that a write meeting another
// connection's write transaction fails at once with SQLITE_BUSY.
func openMattn(t *testing.T, params string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite3", "file:"+filepath.Join(t.TempDir(), "lock.db")+"?_busy_timeout=0&_journal_mode=WAL"+params)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if err := jdbc.CreateSchema(t.Context(), db); err != nil {
		t.Fatal(err)
	}
	return db
}

// holdWriteTransaction makes another connection of db hold a write
// transaction until the returned function is called.
func holdWriteTransaction(t *testing.T, db *sql.DB) (end func()) {
	t.Helper()
	c, err := db.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ExecContext(t.Context(), `BEGIN IMMEDIATE`); err != nil {
		t.Fatal(err)
	}
	ended := false
	end = func() {
		if !ended {
			ended = true
			c.ExecContext(context.Background(), `ROLLBACK`)
			c.Close()
		}
	}
	t.Cleanup(end)
	return end
}

func newRepository(t *testing.T, db *sql.DB) *jdbc.LockRepository {
	t.Helper()
	repo, err := jdbc.NewLockRepository(t.Context(), db)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { repo.Close(context.Background()) })
	return repo
}

func TestMattnBusyDatabaseIsTransient(t *testing.T) {
	db := openMattn(t, "")
	repo := newRepository(t, db)
	end := holdWriteTransaction(t, db)
	_, _, err := repo.Acquire(t.Context(), "k", time.Minute)
	if !errors.Is(err, registry.ErrTransient) {
		t.Fatalf("Acquire on a busy database: got %v, want an error wrapping registry.ErrTransient", err)
	}
	end()
	if _, ok, err := repo.Acquire(t.Context(), "k", time.Minute); err != nil || !ok {
		t.Fatalf("Acquire after the transaction ended = %v, %v; want true, nil", ok, err)
	}
}

func TestMattnLockContextWaitsOutABusyDatabase(t *testing.T) {
	before := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, before) }) // runs last
	db := openMattn(t, "")
	retrying := make(chan error, 1)
	reg, err := registry.New(newRepository(t, db), registry.WithErrorHandler(func(_ string, err error) {
		select {
		case retrying <- err:
		default:
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close(context.Background())
	end := holdWriteTransaction(t, db)
	locked := make(chan error, 1)
	go func() { locked <- reg.Obtain("k").LockContext(t.Context()) }()
	select {
	case err := <-retrying: // the registry met SQLITE_BUSY and retries
		if !errors.Is(err, registry.ErrTransient) {
			t.Fatalf("reported %v, want a transient error", err)
		}
	case err := <-locked:
		t.Fatalf("LockContext on a busy database returned %v; want it to retry until the database is free", err)
	}
	end()
	if err := <-locked; err != nil {
		t.Fatalf("LockContext after the transaction ended: %v", err)
	}
}

func TestMattnLockedTableIsTransient(t *testing.T) {
	// In shared-cache mode a table written by another connection's open
	// transaction is SQLITE_LOCKED (6), which no busy timeout waits out.
	db := openMattn(t, "&cache=shared")
	repo := newRepository(t, db)
	c, err := db.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.ExecContext(t.Context(), `BEGIN`); err != nil {
		t.Fatal(err)
	}
	defer c.ExecContext(context.Background(), `ROLLBACK`)
	if _, err := c.ExecContext(t.Context(), `DELETE FROM INT_LOCK`); err != nil {
		t.Fatal(err)
	}
	_, _, err = repo.Acquire(t.Context(), "k", time.Minute)
	if !errors.Is(err, registry.ErrTransient) {
		t.Fatalf("Acquire on a locked table: got %v, want an error wrapping registry.ErrTransient", err)
	}
}
