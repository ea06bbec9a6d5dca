//go:build chaos

package chaos

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"go.uber.org/goleak"

	"github.com/lockreg/lockreg/internal/testdb"
	"github.com/lockreg/lockreg/jdbc"
	"github.com/lockreg/lockreg/registry"
)

// After registries have contended, kept leases alive, abandoned attempts
// and listened for releases, closing them and their pools leaves no
// goroutine behind, and the process's file descriptors and the server's
// connections return to their starting counts.
func TestClosingLeavesNoGoroutinesFilesOrConnections(t *testing.T) {
	for _, b := range allBackends(t) {
		t.Run(b.Name, func(t *testing.T) {
			// SQLite defers closing a file while another connection of the
			// process has it open, so no other pool may stay open on the file.
			b.Require(t)
			b.DB.Close()
			taggedDSN, count := taggedConnections(t, b)
			goroutines := goleak.IgnoreCurrent()
			fds := openFiles(t)
			conns := count()

			db, err := sql.Open(b.Driver, taggedDSN)
			if err != nil {
				t.Fatal(err)
			}
			tagged := b
			tagged.DB = db
			run := newRun()
			idle := registry.WithIdleBetweenTries(10 * time.Millisecond)
			regs := []*registry.Registry{
				unclosedRegistry(t, tagged, run, idle, registry.WithKeepAlive(), registry.WithTTL(time.Second)),
				unclosedRegistry(t, tagged, run, idle),
			}
			contend(t, regs, scale(20))
			if n := count(); n <= conns && b.Dialect != jdbc.SQLite {
				t.Fatalf("the server shows %d connections of the test while it runs, %d before: the count does not see them", n, conns)
			}

			// A lock held at Close stays held until unlocked.
			held := regs[0].Obtain("held")
			if err := held.LockContext(context.Background()); err != nil {
				t.Fatal(err)
			}
			for _, r := range regs {
				if err := r.Close(context.Background()); err != nil {
					t.Errorf("Close: %v", err)
				}
			}
			if err := held.UnlockContext(context.Background()); err != nil {
				t.Errorf("unlock after Close: %v", err)
			}
			if err := db.Close(); err != nil {
				t.Error(err)
			}

			goleak.VerifyNone(t, goroutines)
			eventually(t, "open file descriptors", fds, func() int { return openFiles(t) })
			if b.Dialect != jdbc.SQLite {
				eventually(t, "server connections", conns, count)
			}
		})
	}
}

// contend has two goroutines per registry take two keys n times each,
// holding every lock briefly, and abandons one wait by its deadline.
func contend(t *testing.T, regs []*registry.Registry, n int) {
	t.Helper()
	var wg sync.WaitGroup
	for _, r := range regs {
		for g := range 2 {
			wg.Go(func() {
				for i := range n {
					l := r.Obtain(fmt.Sprintf("k%d", (g+i)%2))
					if err := l.LockContext(context.Background()); err != nil {
						t.Error(err)
						return
					}
					time.Sleep(time.Millisecond)
					if err := l.UnlockContext(context.Background()); err != nil {
						t.Error(err)
					}
				}
			})
		}
	}
	wg.Wait()
	l := regs[0].Obtain("abandoned")
	if err := l.LockContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := regs[1].Obtain("abandoned").LockContext(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("waiting for a held lock until a deadline: %v", err)
	}
	if err := l.UnlockContext(context.Background()); err != nil {
		t.Error(err)
	}
}

// openFiles counts the process's open file descriptors.
func openFiles(t *testing.T) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("cannot count file descriptors: %v", err)
	}
	return len(entries)
}

// eventually waits up to 10 s for count() to fall to want or below.
func eventually(t *testing.T, what string, want int, count func() int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n := count()
		if n <= want {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%s: %d after Close, %d before", what, n, want)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// taggedConnections returns a DSN whose server connections can be told
// apart from everyone else's (PostgreSQL: an application_name; MariaDB: a
// user of the test's own) and a function that counts them on a pool of its
// own, which holds its connection already.
func taggedConnections(t *testing.T, b testdb.Backend) (dsn string, count func() int) {
	t.Helper()
	if b.Dialect == jdbc.SQLite {
		return b.DSN, func() int { return 0 }
	}
	// One connection held for the whole test: a pooled one would be closed
	// after the pool's idle time while the test runs, and the next count
	// would start goroutines for a new one (the pool's cleaner, MySQL's
	// watcher) that the leak check then reports.
	admin, err := testdb.OpenPool(t, b.Driver, b.DSN).Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	switch b.Dialect {
	case jdbc.Postgres:
		app := newRun()
		u, err := url.Parse(b.DSN)
		if err != nil {
			t.Fatal(err)
		}
		q := u.Query()
		q.Set("application_name", app)
		u.RawQuery = q.Encode()
		return u.String(), func() int {
			var n int
			if err := admin.QueryRowContext(context.Background(), `SELECT COUNT(*) FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}
	default:
		const user = "chaos_leak"
		for _, s := range []string{`CREATE USER IF NOT EXISTS '` + user + `'@'%'`, `GRANT ALL ON *.* TO '` + user + `'@'%'`} {
			if _, err := admin.ExecContext(context.Background(), s); err != nil {
				t.Fatalf("%s: %v", s, err)
			}
		}
		cfg, err := mysql.ParseDSN(b.DSN)
		if err != nil {
			t.Fatal(err)
		}
		cfg.User, cfg.Passwd = user, ""
		return cfg.FormatDSN(), func() int {
			var n int
			if err := admin.QueryRowContext(context.Background(), `SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE USER = ?`, user).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
}
