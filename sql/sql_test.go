package sql_test

import (
	"io/fs"
	"regexp"
	"slices"
	"strings"
	"testing"

	lockregsql "github.com/lockreg/lockreg/sql"
)

var dialects = []string{"postgres", "mysql", "sqlite"}

var scriptName = regexp.MustCompile(`^[0-9]{6}_[a-z0-9_]+\.up\.sql$`)

func TestEveryDialectHasTheLockTableScript(t *testing.T) {
	for _, d := range dialects {
		t.Run(d, func(t *testing.T) {
			b, err := fs.ReadFile(lockregsql.FS, d+"/000001_lock.up.sql")
			if err != nil {
				t.Fatal(err)
			}
			s := string(b)
			for _, want := range []string{
				"CREATE TABLE IF NOT EXISTS INT_LOCK (",
				"LOCK_KEY CHAR(36) NOT NULL",
				"REGION VARCHAR(100) NOT NULL",
				"CLIENT_ID CHAR(36),",
				"CONSTRAINT INT_LOCK_PK PRIMARY KEY (LOCK_KEY, REGION)",
			} {
				if !strings.Contains(s, want) {
					t.Errorf("script lacks %q:\n%s", want, s)
				}
			}
		})
	}
}

func TestScriptsStartWithGooseUpAndAreNamedForMigrationTools(t *testing.T) {
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
				if !scriptName.MatchString(e.Name()) {
					t.Errorf("%s: name does not match %s", e.Name(), scriptName)
				}
				b, err := fs.ReadFile(lockregsql.FS, d+"/"+e.Name())
				if err != nil {
					t.Fatal(err)
				}
				if first, _, _ := strings.Cut(string(b), "\n"); first != "-- +goose Up" {
					t.Errorf("%s: first line is %q, want %q", e.Name(), first, "-- +goose Up")
				}
			}
			if !slices.IsSorted(names) {
				t.Errorf("ReadDir order is not name order: %v", names)
			}
		})
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
