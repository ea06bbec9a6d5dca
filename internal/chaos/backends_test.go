//go:build chaos

package chaos

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/lockreg/lockreg/internal/testdb"
	"github.com/lockreg/lockreg/registry"
)

// open opens the named backends of package testdb for t (a server that
// cannot be reached fails t when CI=true; Require skips the subtest that
// needs it otherwise), with the tests' tables in each that is reachable.
// SQLite is a fresh file of t's that several processes may open, in WAL
// mode, waiting up to 5 s for each other's writes.
func open(t testing.TB, names ...string) []testdb.Backend {
	t.Helper()
	bs := testdb.Open(t, names...)
	for _, b := range bs {
		if b.DB != nil {
			for _, s := range testTables {
				b.Exec(t, s)
			}
		}
	}
	return bs
}

// allBackends opens PostgreSQL through pgx (whose repositories listen for
// releases), MariaDB and SQLite; serverBackends the two with a server.
func allBackends(t testing.TB) []testdb.Backend { return open(t, "postgres-pgx", "mariadb", "sqlite") }

func serverBackends(t testing.TB) []testdb.Backend { return open(t, "postgres-pgx", "mariadb") }

// testTables are the guarded data of the tests: a counter per key, written
// only with a fencing token greater than the last one, and the holding
// intervals the holders recorded, in the database's clock (microseconds).
var testTables = []string{
	`CREATE TABLE IF NOT EXISTS chaos_counter (run VARCHAR(64) NOT NULL, k VARCHAR(64) NOT NULL,
		n BIGINT NOT NULL, fence BIGINT NOT NULL, PRIMARY KEY (run, k))`,
	`CREATE TABLE IF NOT EXISTS chaos_interval (run VARCHAR(64) NOT NULL, k VARCHAR(64) NOT NULL,
		token BIGINT NOT NULL, proc INT NOT NULL, acquired BIGINT NOT NULL, released BIGINT NOT NULL)`,
}

// pingUntil pings db until it answers or d has passed.
func pingUntil(db *sql.DB, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := db.PingContext(ctx)
		cancel()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// newRun returns an identifier for one test's rows: its region and the
// run column of the test tables.
func newRun() string { return "chaos-" + uuid.NewString()[:18] }

// newRegistry returns a registry on b in region with its own repository
// (one client, see testdb.Backend.NewRepository), closing it when t ends.
func newRegistry(t testing.TB, b testdb.Backend, region string, opts ...registry.Option) *registry.Registry {
	t.Helper()
	reg := unclosedRegistry(t, b, region, opts...)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		reg.Close(ctx)
	})
	return reg
}

// unclosedRegistry is newRegistry without the clean-up: the test closes it.
func unclosedRegistry(t testing.TB, b testdb.Backend, region string, opts ...registry.Option) *registry.Registry {
	t.Helper()
	repo, err := b.NewRepository(context.Background(), region)
	if err != nil {
		t.Fatal(err)
	}
	opts = append([]registry.Option{registry.WithErrorHandler(func(string, error) {})}, opts...)
	reg, err := registry.New(repo, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

// seedCounters creates the counter rows of keys for run.
func seedCounters(t testing.TB, b testdb.Backend, run string, keys []string) {
	t.Helper()
	for _, k := range keys {
		b.Exec(t, `INSERT INTO chaos_counter (run, k, n, fence) VALUES (?, ?, 0, 0)`, run, k)
	}
	t.Cleanup(func() {
		b.DB.Exec(b.Q(`DELETE FROM chaos_counter WHERE run = ?`), run)
		b.DB.Exec(b.Q(`DELETE FROM chaos_interval WHERE run = ?`), run)
	})
}

// counter reads the counter of key in run.
func counter(t testing.TB, b testdb.Backend, run, key string) (n, fence int64) {
	t.Helper()
	if err := b.DB.QueryRow(b.Q(`SELECT n, fence FROM chaos_counter WHERE run = ? AND k = ?`), run, key).Scan(&n, &fence); err != nil {
		t.Fatal(err)
	}
	return n, fence
}

// errRefused reports a guarded write refused because a greater token had
// written.
var errRefused = errors.New("write refused: a greater fencing token has written")

// incrementFenced is the critical section of the tests: it reads key's
// counter and writes it back plus one, guarded by token. It returns
// errRefused if a holder with a greater token has written since. A write
// that committed although its result was lost (a dropped connection) is
// recognised on retry by the fence equal to token.
func incrementFenced(ctx context.Context, b testdb.Backend, run, key string, token int64) error {
	var n, fence int64
	if err := b.DB.QueryRowContext(ctx, b.Q(`SELECT n, fence FROM chaos_counter WHERE run = ? AND k = ?`), run, key).Scan(&n, &fence); err != nil {
		return err
	}
	if fence == token {
		return nil // this hold's write committed before
	}
	res, err := b.DB.ExecContext(ctx, b.Q(`UPDATE chaos_counter SET n = ?, fence = ? WHERE run = ? AND k = ? AND fence < ?`),
		n+1, token, run, key, token)
	if err != nil {
		return err
	}
	if a, err := res.RowsAffected(); err != nil {
		return err
	} else if a != 1 {
		return fmt.Errorf("%w (token %d, key %q)", errRefused, token, key)
	}
	return nil
}

// serverControls are the shell commands that stop and start the servers
// (restart tests only), by backend name, and the variables that override
// them.
var serverControls = map[string]struct{ stopEnv, startEnv, stop, start string }{
	"postgres-pgx": {"LOCKREG_CHAOS_POSTGRES_STOP", "LOCKREG_CHAOS_POSTGRES_START",
		"pg_ctlcluster --skip-systemctl-redirect 15 main stop -m fast",
		"pg_ctlcluster --skip-systemctl-redirect 15 main start"},
	"mariadb": {"LOCKREG_CHAOS_MYSQL_STOP", "LOCKREG_CHAOS_MYSQL_START",
		"mariadb-admin -uroot -h127.0.0.1 shutdown",
		"start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd"},
}

// serverControl returns the commands that stop and start b's server, or
// skips t (fails it on CI) when they are not available.
func serverControl(t testing.TB, b testdb.Backend) (stop, start string) {
	t.Helper()
	c := serverControls[b.Name]
	stop, start = c.stop, c.start
	if v := os.Getenv(c.stopEnv); v != "" {
		stop = v
	}
	if v := os.Getenv(c.startEnv); v != "" {
		start = v
	}
	for _, cmd := range []string{stop, start} {
		if _, err := exec.LookPath(strings.Fields(cmd)[0]); err != nil {
			testdb.Unreachable(t, fmt.Sprintf("%s server control unreachable: %q: %v (set %s and %s)", b.Name, cmd, err, c.stopEnv, c.startEnv))
		}
	}
	return stop, start
}

// shell runs a server-control command.
func shell(command string) error {
	out, err := exec.Command("sh", "-c", command).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w: %s", command, err, out)
	}
	return nil
}

// ensureUp starts b's server unless it answers, and waits until it does.
func ensureUp(t testing.TB, b testdb.Backend, start string) {
	t.Helper()
	db, err := sql.Open(b.Driver, b.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if pingUntil(db, 0) == nil {
		return
	}
	if err := shell(start); err != nil {
		t.Errorf("starting %s: %v", b.Name, err)
	}
	if err := pingUntil(db, 60*time.Second); err != nil {
		t.Errorf("%s does not answer after start: %v", b.Name, err)
	}
}
