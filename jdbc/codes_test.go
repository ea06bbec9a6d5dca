package jdbc_test

import (
	"errors"
	"strconv"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/lockreg/lockreg/jdbc"
)

// wantCode checks the driver's error code behind err: a SQLSTATE on
// Postgres, an error number on MySQL, a primary result code on SQLite.
func wantCode(t testing.TB, d jdbc.Dialect, err error, want string) {
	t.Helper()
	var got string
	switch d {
	case jdbc.Postgres:
		var st interface{ SQLState() string }
		if errors.As(err, &st) {
			got = st.SQLState()
		}
	case jdbc.MySQL:
		var my *mysql.MySQLError
		if errors.As(err, &my) {
			got = strconv.Itoa(int(my.Number))
		}
	case jdbc.SQLite:
		var lite interface{ Code() int }
		if errors.As(err, &lite) {
			got = strconv.Itoa(lite.Code() & 0xff)
		}
	}
	if got != want {
		t.Fatalf("error code %q, want %q: %v", got, want, err)
	}
}
