package tooltest

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/lockreg/lockreg/jdbc"
	lockregsql "github.com/lockreg/lockreg/sql"
)

// psql runs a script file as package sql's doc says: psql -1 (one
// transaction) with ON_ERROR_STOP, so that a failing statement fails it.
func psql(t *testing.T, f freshDB, file string) {
	t.Helper()
	out, err := exec.Command("psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-1", "-f", file, f.dsn).CombinedOutput()
	if err != nil {
		t.Fatalf("psql -1 -f %s: %v\n%s", filepath.Base(file), err, out)
	}
}

// Each PostgreSQL script runs with psql -1 -f, twice in a row, in name
// order up and in reverse order down.
func TestPsqlRunsEachPostgresScriptTwice(t *testing.T) {
	if _, err := exec.LookPath("psql"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip("psql is not installed") // and this is not CI, where it fails instead
	}
	var s server
	for _, s = range servers {
		if s.dialect == jdbc.Postgres {
			break
		}
	}
	f := fresh(t, s)
	db := f.open(t, "")
	dir := t.TempDir()
	if err := os.CopyFS(dir, lockregsql.FS); err != nil {
		t.Fatal(err)
	}
	ups, _ := fs.Glob(lockregsql.FS, "postgres/*.up.sql")
	downs, _ := fs.Glob(lockregsql.FS, "postgres/*.down.sql")
	slices.Reverse(downs)
	for _, up := range ups {
		psql(t, f, filepath.Join(dir, up))
		psql(t, f, filepath.Join(dir, up))
	}
	wantLockregWorks(t, f, db)
	for _, down := range downs {
		psql(t, f, filepath.Join(dir, down))
		psql(t, f, filepath.Join(dir, down))
	}
	if got := tables(t, f, db); len(got) > 0 {
		t.Fatalf("after the down scripts, tables %v remain", got)
	}
}

// On MySQL/MariaDB each script, sent whole as golang-migrate sends it, runs
// twice in a row, in name order up and in reverse order down.
func TestEachMySQLScriptRunsTwiceInARow(t *testing.T) {
	var s server
	for _, s = range servers {
		if s.dialect == jdbc.MySQL {
			break
		}
	}
	f := fresh(t, s)
	db := f.open(t, "")
	multi := f.open(t, "", "multiStatements=true")
	ups, _ := fs.Glob(lockregsql.FS, "mysql/*.up.sql")
	downs, _ := fs.Glob(lockregsql.FS, "mysql/*.down.sql")
	slices.Reverse(downs)
	run := func(name string) {
		b, err := fs.ReadFile(lockregsql.FS, name)
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if _, err := multi.Exec(string(b)); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
		}
	}
	for _, up := range ups {
		run(up)
	}
	wantLockregWorks(t, f, db)
	for _, down := range downs {
		run(down)
	}
	if got := tables(t, f, db); len(got) > 0 {
		t.Fatalf("after the down scripts, tables %v remain", got)
	}
}
