package sql_test

import (
	"errors"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	lockregsql "github.com/lockreg/lockreg/sql"
)

var dialects = []string{"postgres", "mysql", "sqlite"}

var scriptName = regexp.MustCompile(`^[0-9]{6}_[a-z0-9_]+\.(up|down)\.sql$`)

func TestScriptsAreNamedForGolangMigrateAndStartWithGooseAnnotations(t *testing.T) {
	for _, d := range dialects {
		t.Run(d, func(t *testing.T) {
			entries, err := fs.ReadDir(lockregsql.FS, d)
			if err != nil {
				t.Fatal(err)
			}
			if len(entries) == 0 {
				t.Fatal("no scripts")
			}
			var names []string
			for _, e := range entries {
				names = append(names, e.Name())
				m := scriptName.FindStringSubmatch(e.Name())
				if m == nil {
					t.Errorf("%s: name does not match %s", e.Name(), scriptName)
					continue
				}
				b, err := fs.ReadFile(lockregsql.FS, d+"/"+e.Name())
				if err != nil {
					t.Fatal(err)
				}
				want := map[string]string{"up": "-- +goose Up", "down": "-- +goose Down"}[m[1]]
				if first, _, _ := strings.Cut(string(b), "\n"); first != want {
					t.Errorf("%s: first line is %q, want %q", e.Name(), first, want)
				}
			}
			if !slices.IsSorted(names) {
				t.Errorf("ReadDir order is not name order: %v", names)
			}
		})
	}
}

func TestEveryUpScriptHasADownScript(t *testing.T) {
	for _, d := range dialects {
		ups, _ := fs.Glob(lockregsql.FS, d+"/*.up.sql")
		downs, _ := fs.Glob(lockregsql.FS, d+"/*.down.sql")
		for i := range ups {
			ups[i] = strings.TrimSuffix(ups[i], ".up.sql")
		}
		for i := range downs {
			downs[i] = strings.TrimSuffix(downs[i], ".down.sql")
		}
		if len(ups) == 0 || !slices.Equal(ups, downs) {
			t.Errorf("%s: up scripts %v, down scripts %v", d, ups, downs)
		}
	}
}

func TestGooseJoinsEachUpAndDownScriptIntoOneFile(t *testing.T) {
	for _, d := range dialects {
		t.Run(d, func(t *testing.T) {
			fsys, err := lockregsql.Goose(d)
			if err != nil {
				t.Fatal(err)
			}
			ups, _ := fs.Glob(lockregsql.FS, d+"/*.up.sql")
			var want []string
			for _, up := range ups {
				base := strings.TrimSuffix(path.Base(up), ".up.sql")
				want = append(want, base+".sql")
				u, _ := fs.ReadFile(lockregsql.FS, up)
				down, _ := fs.ReadFile(lockregsql.FS, d+"/"+base+".down.sql")
				got, err := fs.ReadFile(fsys, base+".sql")
				if err != nil {
					t.Fatal(err)
				}
				if string(got) != string(u)+"\n"+string(down) {
					t.Errorf("%s.sql is not the up script, a blank line and the down script:\n%s", base, got)
				}
			}
			if err := fstest.TestFS(fsys, want...); err != nil {
				t.Error(err)
			}
			if names, _ := fs.Glob(fsys, "*"); !slices.Equal(names, want) {
				t.Errorf("files %v, want %v", names, want)
			}
		})
	}
}

func TestGooseOfAnUnknownDialectIsErrNotExist(t *testing.T) {
	for _, d := range []string{"oracle", "", "*", "postgres/.."} {
		if _, err := lockregsql.Goose(d); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("Goose(%q): %v, want an error wrapping fs.ErrNotExist", d, err)
		}
	}
}

func TestTimesUseTheDialectsTimestampType(t *testing.T) {
	want := map[string][]string{
		"postgres": {"CREATED_DATE TIMESTAMP NOT NULL", "EXPIRED_AFTER TIMESTAMP NOT NULL"},
		"mysql":    {"CREATED_DATE DATETIME(6) NOT NULL", "EXPIRED_AFTER DATETIME(6) NOT NULL", "ENGINE=InnoDB"},
		"sqlite":   {"CREATED_DATE TEXT NOT NULL", "EXPIRED_AFTER TEXT NOT NULL"},
	}
	for d, wants := range want {
		b, err := fs.ReadFile(lockregsql.FS, d+"/000001_lock.up.sql")
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range wants {
			if !strings.Contains(string(b), w) {
				t.Errorf("%s: script lacks %q", d, w)
			}
		}
	}
}
