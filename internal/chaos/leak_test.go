//go:build chaos

package chaos

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"
	"go.uber.org/goleak"

	"github.com/lockreg/lockreg/jdbc"
	"github.com/lockreg/lockreg/jdbc/pgxlisten"
	"github.com/lockreg/lockreg/registry"
)

// After registries have contended, kept leases alive, abandoned attempts
// and listened for releases, closing them and their pools leaves no
// goroutine behind, and the process's file descriptors and the server's
// connections return to their starting counts.
func TestClosingLeavesNoGoroutinesFilesOrConnections(t *testing.T) {
	for _, b := range allBackends(t) {
		t.Run(b.name, func(t *testing.T) {
			// The schema, and a skip when unreachable. SQLite defers closing a
			// file while another connection of the process has it open, so no
			// other pool may stay open on the file.
			b.open(t).Close()
			tagged, count := b.taggedConnections(t)
			goroutines := goleak.IgnoreCurrent()
			fds := openFiles(t)
			conns := count()

			db, err := sqlx.Open(b.driver, tagged)
			if err != nil {
				t.Fatal(err)
			}
			run := newRun()
			regs := []*registry.Registry{
				leakRegistry(t, db, b.dialect, run, registry.WithKeepAlive(), registry.WithTTL(time.Second)),
				leakRegistry(t, db, b.dialect, run),
			}
			contend(t, regs, scale(20))
			if n := count(); n <= conns && b.dialect != jdbc.SQLite {
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
			if b.dialect != jdbc.SQLite {
				eventually(t, "server connections", conns, count)
			}
		})
	}
}

// leakRegistry is newRegistry without the clean-up: the test closes it.
func leakRegistry(t *testing.T, db *sqlx.DB, d jdbc.Dialect, region string, opts ...registry.Option) *registry.Registry {
	t.Helper()
	repoOpts := []jdbc.Option{jdbc.WithRegion(region), jdbc.WithErrorHandler(func(error) {})}
	if d == jdbc.Postgres {
		repoOpts = append(repoOpts, jdbc.WithListener(pgxlisten.New(db.DB)))
	}
	repo, err := jdbc.NewLockRepository(context.Background(), db, repoOpts...)
	if err != nil {
		t.Fatal(err)
	}
	opts = append([]registry.Option{registry.WithErrorHandler(func(string, error) {}),
		registry.WithIdleBetweenTries(10 * time.Millisecond)}, opts...)
	r, err := registry.New(repo, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return r
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
// user of the test's own) and a function that counts them.
func (b backend) taggedConnections(t *testing.T) (dsn string, count func() int) {
	t.Helper()
	b = b.resolve()
	switch b.dialect {
	case jdbc.SQLite:
		return b.dsn, func() int { return 0 }
	case jdbc.Postgres:
		app := newRun()
		u, err := url.Parse(b.dsn)
		if err != nil {
			t.Fatal(err)
		}
		q := u.Query()
		q.Set("application_name", app)
		u.RawQuery = q.Encode()
		admin := b.open(t)
		return u.String(), func() int {
			var n int
			if err := admin.QueryRow(`SELECT COUNT(*) FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}
	default:
		admin := b.open(t)
		const user = "chaos_leak"
		for _, s := range []string{`CREATE USER IF NOT EXISTS '` + user + `'@'%'`, `GRANT ALL ON *.* TO '` + user + `'@'%'`} {
			if _, err := admin.Exec(s); err != nil {
				t.Fatalf("%s: %v", s, err)
			}
		}
		cfg, err := mysql.ParseDSN(b.dsn)
		if err != nil {
			t.Fatal(err)
		}
		cfg.User, cfg.Passwd = user, ""
		return cfg.FormatDSN(), func() int {
			var n int
			if err := admin.QueryRow(`SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE USER = ?`, user).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
}
