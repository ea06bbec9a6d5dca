package main_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/lockreg/lockreg/groupstore"
	"github.com/lockreg/lockreg/groupstore/sqlstore"
	"github.com/lockreg/lockreg/internal/testdb"
	"github.com/lockreg/lockreg/jdbc"
)

// The built command, run against real servers.

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "lockreg-cli")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "lockreg")
	if out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// target is a database for the command: a DSN and a fresh table prefix,
// and a pool on the same tables for the test.
type target struct {
	dsn, prefix string
	db          *sql.DB
	dialect     jdbc.Dialect
}

// forEachBackend runs test on each backend (PostgreSQL once: the command
// always uses pgx) with fresh tables.
func forEachBackend(t *testing.T, test func(t *testing.T, tg target)) {
	testdb.ForEachWhere(t, func(b testdb.Backend) bool { return b.Name != "postgres-pq" }, func(t *testing.T, b testdb.Backend) {
		tg := target{dsn: b.DSN, db: b.DB, dialect: b.Dialect,
			prefix: "CLI" + strings.ToUpper(strings.ReplaceAll(uuid.NewString(), "-", "")[:10]) + "_"}
		if b.Dialect == jdbc.SQLite {
			tg.dsn = testdb.SQLiteDSN(filepath.Join(t.TempDir(), "cli.db"), 5000)
			db, err := sql.Open(b.Driver, tg.dsn)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			tg.db = db
		}
		test(t, tg)
	})
}

// lockreg runs the command with the target's DSN and prefix after args'
// first one or two words (the command), and returns its output and exit
// status.
func (tg target) lockreg(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	n := 2
	if args[0] == "cleanup" {
		n = 1
	}
	full := append(append(append([]string{}, args[:n]...), "-dsn", tg.dsn, "-prefix", tg.prefix), args[n:]...)
	return runBinary(t, nil, full...)
}

func runBinary(t *testing.T, env []string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return out.String(), errOut.String(), exit.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return out.String(), errOut.String(), 0
}

func (tg target) mustRun(t *testing.T, args ...string) string {
	t.Helper()
	out, errOut, code := tg.lockreg(t, args...)
	if code != 0 {
		t.Fatalf("lockreg %v: exit %d: %s", args, code, errOut)
	}
	return out
}

func (tg target) apply(t *testing.T) {
	t.Helper()
	tg.mustRun(t, "schema", "apply")
}

func (tg target) repo(t *testing.T, opts ...jdbc.Option) *jdbc.LockRepository {
	t.Helper()
	repo, err := jdbc.NewLockRepository(context.Background(), tg.db,
		append([]jdbc.Option{jdbc.WithPrefix(tg.prefix), jdbc.WithoutCleanup()}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { repo.Close(context.Background()) })
	return repo
}

func (tg target) store(t *testing.T) *sqlstore.Store {
	t.Helper()
	s, err := sqlstore.New(tg.db, sqlstore.Config{Prefix: tg.prefix, DisableCleanup: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s
}

func TestSchemaStatusFailsUntilSchemaApplyCreatesTheTables(t *testing.T) {
	forEachBackend(t, func(t *testing.T, tg target) {
		out, _, code := tg.lockreg(t, "schema", "status")
		if code != 1 || !strings.Contains(out, "does not exist") {
			t.Fatalf("status before apply: exit %d, %q; want 1 naming the missing table", code, out)
		}
		tg.apply(t)
		tg.apply(t) // again: it completes what is missing, here nothing
		var status []struct {
			Tables string
			OK     bool
		}
		if err := json.Unmarshal([]byte(tg.mustRun(t, "schema", "status", "-json")), &status); err != nil {
			t.Fatal(err)
		}
		if len(status) != 2 || !status[0].OK || !status[1].OK {
			t.Fatalf("status after apply: %+v", status)
		}
	})
}

type lease struct {
	Key, Holder string
	ClientID    string `json:"client_id"`
	Held        bool
}

func TestLocksListShowsWhoHoldsWhat(t *testing.T) {
	forEachBackend(t, func(t *testing.T, tg target) {
		tg.apply(t)
		repo := tg.repo(t, jdbc.WithApplicationName("billing"))
		ctx := context.Background()
		for _, k := range []string{"orders/1", "orders/2", "users/1"} {
			if _, ok, err := repo.Acquire(ctx, k, time.Minute); !ok || err != nil {
				t.Fatal(ok, err)
			}
		}
		if err := repo.Release(ctx, "orders/2"); err != nil {
			t.Fatal(err)
		}
		var got []lease
		if err := json.Unmarshal([]byte(tg.mustRun(t, "locks", "list", "-json", "-held", "-name-prefix", "orders/")), &got); err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || got[0].Key != "orders/1" || got[0].Holder != repo.Holder() || got[0].ClientID != repo.ClientID() || !got[0].Held {
			t.Fatalf("locks list -held -name-prefix orders/: %+v; want orders/1 held by %s", got, repo.Holder())
		}
		table := tg.mustRun(t, "locks", "list")
		for _, want := range []string{"orders/1", "orders/2", "users/1", "held", "expired", repo.Holder(), "HOLDER"} {
			if !strings.Contains(table, want) {
				t.Errorf("locks list lacks %q:\n%s", want, table)
			}
		}
		show := tg.mustRun(t, "locks", "show", "users/1")
		if !strings.Contains(show, "users/1") || !strings.Contains(show, repo.Holder()) {
			t.Errorf("locks show users/1:\n%s", show)
		}
	})
}

func TestLocksShowOfAKeyWithoutARowFails(t *testing.T) {
	forEachBackend(t, func(t *testing.T, tg target) {
		tg.apply(t)
		_, errOut, code := tg.lockreg(t, "locks", "show", "nobody")
		if code != 1 || !strings.Contains(errOut, "no lock row") {
			t.Fatalf("exit %d, %q; want 1 and a message", code, errOut)
		}
	})
}

func TestLocksReleaseNeedsForceAndThenEndsTheLease(t *testing.T) {
	forEachBackend(t, func(t *testing.T, tg target) {
		tg.apply(t)
		holder, other := tg.repo(t), tg.repo(t)
		ctx := context.Background()
		if _, ok, err := holder.Acquire(ctx, "k", time.Minute); !ok || err != nil {
			t.Fatal(ok, err)
		}
		if _, errOut, code := tg.lockreg(t, "locks", "release", "k"); code != 2 || !strings.Contains(errOut, "-force") {
			t.Fatalf("release without -force: exit %d, %q; want 2 asking for -force", code, errOut)
		}
		if _, ok, _ := other.Acquire(ctx, "k", time.Minute); ok {
			t.Fatal("the lease ended without -force")
		}
		tg.mustRun(t, "locks", "release", "-force", "k")
		if _, ok, err := other.Acquire(ctx, "k", time.Minute); !ok || err != nil {
			t.Fatalf("Acquire after the forced release: %v, %v", ok, err)
		}
		if _, _, code := tg.lockreg(t, "locks", "release", "-force", "none"); code != 1 {
			t.Fatalf("release of a key without a lease: exit %d, want 1", code)
		}
	})
}

func TestLocksWaitersListsPostgresQueue(t *testing.T) {
	forEachBackend(t, func(t *testing.T, tg target) {
		tg.apply(t)
		if tg.dialect != jdbc.Postgres {
			if _, errOut, code := tg.lockreg(t, "locks", "waiters"); code != 1 || !strings.Contains(errOut, "no waiter queue") {
				t.Fatalf("waiters on %s: exit %d, %q; want 1 saying there is no queue", tg.dialect, code, errOut)
			}
			return
		}
		ctx := context.Background()
		holder := tg.repo(t)
		if _, ok, err := holder.Acquire(ctx, "k", time.Minute); !ok || err != nil {
			t.Fatal(ok, err)
		}
		// A waiter queues by the acquire-or-wait statement, which a
		// listening repository uses.
		if _, err := tg.db.ExecContext(ctx, `INSERT INTO `+tg.prefix+`LOCK_WAIT (LOCK_KEY, REGION, CLIENT_ID, WAITING_SINCE, `+
			`WAITING_UNTIL, LEASE_MICROS, HOLDER) VALUES ($1, 'DEFAULT', 'waiting-client', timezone('UTC', now()), `+
			`timezone('UTC', now()) + INTERVAL '1 hour', 1000000, 'host=h pid=1 app=w')`, jdbc.UUIDKey("k")); err != nil {
			t.Fatal(err)
		}
		var got []struct{ Key, Holder string }
		if err := json.Unmarshal([]byte(tg.mustRun(t, "locks", "waiters", "-json")), &got); err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || got[0].Key != "k" || got[0].Holder != "host=h pid=1 app=w" {
			t.Fatalf("waiters: %+v", got)
		}
	})
}

func TestGroupsListShowExpireAndDelete(t *testing.T) {
	forEachBackend(t, func(t *testing.T, tg target) {
		tg.apply(t)
		s := tg.store(t)
		ctx := context.Background()
		for _, m := range []string{"m1", "m2"} {
			if _, _, err := s.Add(ctx, "order-7", groupstore.Message{UUID: m, Payload: []byte("abc")}, time.Hour); err != nil {
				t.Fatal(err)
			}
		}
		if out := tg.mustRun(t, "groups", "list", "-state", "due"); strings.Contains(out, "order-7") {
			t.Fatalf("a group due in an hour listed as due:\n%s", out)
		}
		show := tg.mustRun(t, "groups", "show", "order-7")
		for _, want := range []string{"order-7", "open", "m1", "m2", "POSITION"} {
			if !strings.Contains(show, want) {
				t.Errorf("groups show lacks %q:\n%s", want, show)
			}
		}
		tg.mustRun(t, "groups", "expire", "order-7")
		var due []struct {
			Key  string
			Size int
		}
		if err := json.Unmarshal([]byte(tg.mustRun(t, "groups", "list", "-state", "due", "-json")), &due); err != nil {
			t.Fatal(err)
		}
		if len(due) != 1 || due[0].Key != "order-7" || due[0].Size != 2 {
			t.Fatalf("due groups after expire: %+v", due)
		}
		if _, _, code := tg.lockreg(t, "groups", "delete", "order-7"); code != 2 {
			t.Fatalf("delete without -force: exit %d, want 2", code)
		}
		tg.mustRun(t, "groups", "delete", "-force", "order-7")
		if _, err := s.Get(ctx, "order-7"); !errors.Is(err, groupstore.ErrNotFound) {
			t.Fatalf("Get after delete: %v, want ErrNotFound", err)
		}
		if _, errOut, code := tg.lockreg(t, "groups", "show", "order-7"); code != 1 || !strings.Contains(errOut, "not found") {
			t.Fatalf("show of a deleted group: exit %d, %q", code, errOut)
		}
	})
}

func TestCleanupDeletesExpiredLockRows(t *testing.T) {
	forEachBackend(t, func(t *testing.T, tg target) {
		tg.apply(t)
		repo := tg.repo(t)
		ctx := context.Background()
		for _, k := range []string{"live", "gone"} {
			if _, ok, err := repo.Acquire(ctx, k, time.Minute); !ok || err != nil {
				t.Fatal(ok, err)
			}
		}
		if err := repo.Release(ctx, "gone"); err != nil {
			t.Fatal(err)
		}
		var got struct {
			LockRows int64 `json:"lock_rows"`
		}
		if err := json.Unmarshal([]byte(tg.mustRun(t, "cleanup", "-json")), &got); err != nil {
			t.Fatal(err)
		}
		if got.LockRows != 1 {
			t.Fatalf("cleanup deleted %d lock rows, want 1", got.LockRows)
		}
		var left []lease
		if err := json.Unmarshal([]byte(tg.mustRun(t, "locks", "list", "-json")), &left); err != nil {
			t.Fatal(err)
		}
		if len(left) != 1 || left[0].Key != "live" {
			t.Fatalf("rows after cleanup: %+v", left)
		}
	})
}

func TestTheDSNComesFromLOCKREG_DSN(t *testing.T) {
	dsn := testdb.SQLiteDSN(filepath.Join(t.TempDir(), "env.db"), 5000)
	if out, errOut, code := runBinary(t, []string{"LOCKREG_DSN=" + dsn}, "schema", "apply"); code != 0 {
		t.Fatalf("exit %d: %s %s", code, out, errOut)
	}
	if _, errOut, code := runBinary(t, []string{"LOCKREG_DSN=" + dsn}, "schema", "status"); code != 0 {
		t.Fatalf("status: exit %d: %s", code, errOut)
	}
}

func TestUsageErrorsExitWithStatus2(t *testing.T) {
	for _, args := range [][]string{{}, {"locks"}, {"locks", "steal"}, {"locks", "list", "-no-such-flag"}, {"locks", "show"}} {
		_, errOut, code := runBinary(t, []string{"LOCKREG_DSN=/nonexistent/x.db"}, args...)
		if code != 2 || !strings.HasPrefix(errOut, "lockreg: ") {
			t.Errorf("lockreg %v: exit %d, %q; want 2 and a message", args, code, errOut)
		}
	}
	if _, errOut, code := runBinary(t, []string{"LOCKREG_DSN="}, "locks", "list"); code != 2 || !strings.Contains(errOut, "LOCKREG_DSN") {
		t.Errorf("without a DSN: exit %d, %q", code, errOut)
	}
}

func TestAnUnreachableServerIsAFailure(t *testing.T) {
	_, errOut, code := runBinary(t, nil, "locks", "list", "-dsn", "postgres://postgres@127.0.0.1:1/none?sslmode=disable&connect_timeout=2")
	if code != 1 || !strings.Contains(errOut, "lockreg: ") {
		t.Fatalf("exit %d, %q; want 1 and the error", code, errOut)
	}
}

func TestHelpPrintsTheDSNRule(t *testing.T) {
	out, _, code := runBinary(t, nil, "help")
	if code != 0 || !strings.Contains(out, "postgres://") || !strings.Contains(out, "@tcp(") || !strings.Contains(out, "SQLite") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
}
