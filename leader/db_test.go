package leader_test

import (
	"testing"

	"github.com/google/uuid"

	"github.com/lockreg/lockreg/internal/testdb"
)

// testTables hold what leaders did, in the database's clock
// (microseconds): their terms, and a counter written only with a fencing
// token greater than the last.
var testTables = []string{
	`CREATE TABLE IF NOT EXISTS leader_term (region VARCHAR(100) NOT NULL, token BIGINT NOT NULL,
		proc INT NOT NULL, started BIGINT NOT NULL, ended BIGINT NOT NULL)`,
	`CREATE TABLE IF NOT EXISTS leader_counter (region VARCHAR(100) NOT NULL PRIMARY KEY,
		n BIGINT NOT NULL, fence BIGINT NOT NULL)`,
}

// forEachDB runs test as a subtest of t on PostgreSQL through pgx (whose
// repositories listen for releases), MariaDB and SQLite, each with the
// tests' tables; a server that cannot be reached fails the test when
// CI=true and skips the subtest otherwise.
func forEachDB(t *testing.T, test func(t *testing.T, db testdb.Backend)) {
	for _, db := range testdb.Open(t, "postgres-pgx", "mariadb", "sqlite") {
		t.Run(db.Name, func(t *testing.T) {
			db.Require(t)
			createTables(t, db)
			test(t, db)
		})
	}
}

// createTables creates the tests' tables on db.
func createTables(t testing.TB, db testdb.Backend) {
	t.Helper()
	for _, s := range testTables {
		db.Exec(t, s)
	}
}

// newRegion returns a region of the lock table no other test uses; its
// rows are deleted when t ends.
func newRegion(t testing.TB, db testdb.Backend) string {
	region := "leader-" + uuid.NewString()[:18]
	t.Cleanup(func() {
		for _, s := range []string{`DELETE FROM INT_LOCK WHERE REGION = ?`, `DELETE FROM leader_term WHERE region = ?`,
			`DELETE FROM leader_counter WHERE region = ?`} {
			db.DB.Exec(db.Q(s), region)
		}
	})
	return region
}
