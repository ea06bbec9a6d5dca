package testdb

import "go.uber.org/goleak"

// DriverGoroutines returns goleak options that ignore the drivers' own
// goroutines, which belong to the pool and its connections, not to the code
// under test:
//   - go-sql-driver/mysql's watcher of an open connection lives as long as
//     the pooled connection;
//   - pgx's asyncClose drains and closes a connection whose statement was
//     cancelled (a Close cancelling a clean-up pass mid-statement); it ends
//     when the server closes the socket, within pgx's 15-s deadline, later
//     than goleak's retries on a loaded machine;
//   - database/sql's connectionCleaner closes the pool's idle connections
//     after their idle time (OpenPool sets one) until the pool closes.
func DriverGoroutines() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreTopFunction("github.com/go-sql-driver/mysql.(*mysqlConn).startWatcher.func1"),
		goleak.IgnoreAnyFunction("github.com/jackc/pgx/v5/pgconn.(*PgConn).asyncClose.func1"),
		goleak.IgnoreTopFunction("database/sql.(*DB).connectionCleaner"),
	}
}
