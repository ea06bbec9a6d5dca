package sqlstore

import (
	"database/sql"
	"testing"

	_ "modernc.org/sqlite"
)

// The Adds in flight at once follow the pool's bound unless configured.
func TestGroupCommitDefaultsToThePoolsBound(t *testing.T) {
	db, err := sql.Open("sqlite", "file:"+t.TempDir()+"/groups.db")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if got := groupCommit(db, 0); got != defaultGroupCommit {
		t.Errorf("unbounded pool: %d in flight, want %d", got, defaultGroupCommit)
	}
	db.SetMaxOpenConns(6)
	for _, c := range []struct{ n, want int }{{0, 6}, {1, 1}, {3, 3}, {-1, -1}} {
		if got := groupCommit(db, c.n); got != c.want {
			t.Errorf("GroupCommit %d on a pool of 6: %d in flight, want %d", c.n, got, c.want)
		}
	}
	var unknown struct{ DB } // no Stats method
	if got := groupCommit(unknown, 0); got != defaultGroupCommit {
		t.Errorf("a DB without Stats: %d in flight, want %d", got, defaultGroupCommit)
	}
}
