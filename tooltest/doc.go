// Package tooltest checks lockreg against the third-party tools and drivers
// its documentation names but the main module must not depend on: goose and
// golang-migrate with the scripts in package sql, mattn/go-sqlite3, and
// PgBouncer. It is a module of its own so that these stay out of users'
// module graphs; it holds tests only.
package tooltest
