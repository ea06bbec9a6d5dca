package jdbc_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/lockreg/lockreg/jdbc"
)

// Misconfigurations that used to pass silently.

// withDSNParam returns db's MySQL DSN with param appended.
func withDSNParam(dsn, param string) string {
	if strings.Contains(dsn, "?") {
		return dsn + "&" + param
	}
	return dsn + "?" + param
}

func TestClientFoundRowsDoesNotGrantAHeldLock(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		if db.Dialect != jdbc.MySQL {
			t.Skip("clientFoundRows is a go-sql-driver/mysql setting")
		}
		found := testDB{Name: db.Name, Dialect: db.Dialect, driver: db.driver, dsn: withDSNParam(db.dsn, "clientFoundRows=true")}
		found.DB = openPool(t, found.driver, found.dsn)
		region := randomRegion()
		a := newRepo(t, found, jdbc.WithRegion(region))
		b := newRepo(t, found, jdbc.WithRegion(region))
		mustAcquire(t, a, "k", longTTL)
		mustNotAcquire(t, b, "k", longTTL)
		wantOwner(t, db, region, "k", a)
	})
}

func TestCustomAcquireQueryWithClientFoundRowsIsRefused(t *testing.T) {
	forEachDB(t, func(t *testing.T, db testDB) {
		if db.Dialect != jdbc.MySQL {
			t.Skip("clientFoundRows is a go-sql-driver/mysql setting")
		}
		found := openPool(t, db.driver, withDSNParam(db.dsn, "clientFoundRows=true"))
		// Spring 6.1's kind of acquire: an unchanged row counts as one
		// affected with clientFoundRows=true, which reads as acquired.
		q := `INSERT INTO %sLOCK (LOCK_KEY, REGION, CLIENT_ID, CREATED_DATE, EXPIRED_AFTER)
			VALUES (:lock_key, :region, :client_id, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) + INTERVAL :ttl MICROSECOND)
			ON DUPLICATE KEY UPDATE CLIENT_ID = IF(EXPIRED_AFTER < VALUES(CREATED_DATE), VALUES(CLIENT_ID), CLIENT_ID)`
		_, err := jdbc.NewLockRepository(t.Context(), found, jdbc.WithRegion(randomRegion()), jdbc.WithAcquireQuery(q))
		if !errors.Is(err, jdbc.ErrClientFoundRows) || !strings.Contains(err.Error(), "clientFoundRows=true") {
			t.Fatalf("got %v, want an error wrapping jdbc.ErrClientFoundRows naming clientFoundRows=true", err)
		}
	})
}
