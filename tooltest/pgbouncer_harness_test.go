package tooltest

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib"
	_ "github.com/lib/pq"

	"github.com/lockreg/lockreg/jdbc"
)

// A PgBouncer of the test's own, started from a generated ini on a free
// port, in front of the PostgreSQL of LOCKREG_POSTGRES_DSN. It serves that
// database under two names, one per pool mode:
//
//	lockreg_session   pool_mode = session, up to 8 server connections
//	lockreg_tx        pool_mode = transaction, 2 server connections, so
//	                  that a client's transactions move between them
//
// and its admin console as the database "pgbouncer".
type pgBouncer struct {
	port   int
	direct string // the DSN of PostgreSQL itself
	admin  *sql.DB
}

const (
	sessionPool     = "lockreg_session"
	transactionPool = "lockreg_tx"
)

// dsn returns a URL DSN of pool (sessionPool or transactionPool) with the
// extra query parameters in params.
func (b pgBouncer) dsn(pool, params string) string {
	dsn := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", b.port, pool)
	if params != "" {
		dsn += "&" + params
	}
	return dsn
}

func postgresDSN() string {
	if v := os.Getenv("LOCKREG_POSTGRES_DSN"); v != "" {
		return v
	}
	return "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
}

// unavailable fails t when CI=true and skips it otherwise.
func unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf(format, args...)
	}
	t.Skipf(format, args...)
}

// pgbouncerBinary finds pgbouncer on PATH or where Debian installs it.
func pgbouncerBinary() (string, error) {
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p, nil
	}
	const debian = "/usr/sbin/pgbouncer"
	if _, err := os.Stat(debian); err == nil {
		return debian, nil
	}
	return "", errors.New("pgbouncer not found on PATH nor at " + debian)
}

// startPgBouncer starts a PgBouncer for t and stops it when t ends. It
// skips t (fails it when CI=true) when the binary or PostgreSQL is missing.
func startPgBouncer(t testing.TB) pgBouncer {
	t.Helper()
	bin, err := pgbouncerBinary()
	if err != nil {
		unavailable(t, "%v: install it with apt-get install -y pgbouncer (.ci/run does)", err)
	}
	direct := postgresDSN()
	if err := ping("pgx", direct); err != nil {
		unavailable(t, "postgres unreachable at %s (set LOCKREG_POSTGRES_DSN): %v", direct, err)
	}
	cfg, err := pgconn.ParseConfig(direct)
	if err != nil {
		t.Fatalf("LOCKREG_POSTGRES_DSN: %v", err)
	}
	server := fmt.Sprintf("host=%s port=%d dbname=%s user=%s", cfg.Host, cfg.Port, cfg.Database, cfg.User)
	if cfg.Password != "" {
		server += " password=" + cfg.Password
	}
	dir := t.TempDir()
	// The port is free when chosen but may be taken before PgBouncer binds
	// it; a start that fails is retried with another port.
	var lastErr error
	for range 5 {
		port, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		ini := filepath.Join(dir, "pgbouncer.ini")
		err = os.WriteFile(ini, []byte(strings.Join([]string{
			"[databases]",
			sessionPool + " = " + server + " pool_mode=session pool_size=8",
			transactionPool + " = " + server + " pool_mode=transaction pool_size=2",
			"[pgbouncer]",
			"listen_addr = 127.0.0.1",
			"listen_port = " + strconv.Itoa(port),
			"unix_socket_dir =",
			// any: no client authentication, and the user of the database
			// lines logs in to PostgreSQL.
			"auth_type = any",
			"admin_users = postgres",
			"max_client_conn = 500",
			"ignore_startup_parameters = extra_float_digits",
			"",
		}, "\n")), 0o644)
		if err != nil {
			t.Fatal(err)
		}
		var args []string
		if os.Geteuid() == 0 {
			// PgBouncer refuses to run as root; -u drops to another user
			// after reading the ini.
			args = append(args, "-u", "nobody")
		}
		cmd := exec.Command(bin, append(args, ini)...)
		var log syncBuffer
		cmd.Stdout, cmd.Stderr = &log, &log
		if err := cmd.Start(); err != nil {
			t.Fatalf("starting %s: %v", bin, err)
		}
		exited := make(chan struct{})
		go func() { cmd.Wait(); close(exited) }()
		if err := waitReady(port, exited); err != nil {
			cmd.Process.Kill()
			<-exited
			lastErr = fmt.Errorf("%w\n%s", err, log.String())
			continue
		}
		t.Cleanup(func() {
			cmd.Process.Kill()
			<-exited
			if t.Failed() {
				t.Logf("pgbouncer's log:\n%s", log.String())
			}
		})
		b := pgBouncer{port: port, direct: direct}
		// The admin console speaks only the simple query protocol.
		b.admin = open(t, "pgx", b.dsn("pgbouncer", "default_query_exec_mode=simple_protocol"))
		return b
	}
	t.Fatalf("pgbouncer did not start: %v", lastErr)
	return pgBouncer{}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// waitReady waits until PgBouncer passes a connection through to
// PostgreSQL on port, or exits.
func waitReady(port int, exited <-chan struct{}) error {
	dsn := pgBouncer{port: port}.dsn(sessionPool, "")
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := ping("pgx", dsn)
		select {
		case <-exited:
			return errors.New("pgbouncer exited")
		default:
		}
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no connection through pgbouncer on port %d: %w", port, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func ping(driverName, dsn string) error {
	db, err := sql.Open(driverName, dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return db.PingContext(ctx)
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// open opens dsn with driverName and closes it when t ends.
func open(t testing.TB, driverName, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open(driverName, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// schema creates lock tables with a prefix of their own through db, drops
// them (directly on PostgreSQL) when t ends and returns the prefix.
func schema(t testing.TB, b pgBouncer, db *sql.DB) string {
	t.Helper()
	prefix := "PGB_" + strings.ReplaceAll(uuid.NewString()[:8], "-", "") + "_"
	t.Cleanup(func() {
		direct, err := sql.Open("pgx", b.direct)
		if err != nil {
			t.Error(err)
			return
		}
		defer direct.Close()
		for _, table := range []string{"LOCK", "LOCK_WAIT", "GROUP", "GROUP_MESSAGE"} {
			if _, err := direct.Exec("DROP TABLE IF EXISTS " + prefix + table); err != nil {
				t.Error(err)
			}
		}
	})
	if err := jdbc.CreateSchema(context.Background(), db, jdbc.WithPrefix(prefix)); err != nil {
		t.Fatalf("CreateSchema through PgBouncer: %v", err)
	}
	return prefix
}

// reconnect makes PgBouncer close pool's server connections once they are
// idle (its RECONNECT command), so that the next transaction runs on a new
// one, which lacks the statements prepared on the old ones.
func (b pgBouncer) reconnect(t testing.TB, pool string) {
	t.Helper()
	if _, err := b.admin.Exec("RECONNECT " + pool); err != nil {
		t.Fatalf("RECONNECT %s: %v", pool, err)
	}
}
