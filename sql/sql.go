// Package sql embeds lockreg's schema scripts, one folder per SQL dialect:
//
//	postgres/  PostgreSQL
//	mysql/     MySQL and MariaDB (InnoDB)
//	sqlite/    SQLite
//
// Each folder holds numbered migrations named NNNNNN_name.up.sql, to be
// applied in name order. Every script starts with the line "-- +goose Up", so
// both goose and golang-migrate accept the folders as they are, and every
// statement is idempotent (CREATE TABLE IF NOT EXISTS ...), so a script may be
// applied again. Statements end with a semicolon at the end of a line and
// contain no other semicolons. Table and constraint names carry Spring
// Integration's default prefix INT_; [github.com/lockreg/lockreg/jdbc.CreateSchema]
// applies the scripts with another prefix when configured to.
//
// INT_LOCK matches Spring Integration 7's lock table column for column, plus
// lockreg's FENCE column, whose default keeps Spring's statements working, so
// lockreg and Spring applications can share it. INT_LOCK_WAIT (PostgreSQL's
// waiter queue), INT_GROUP and INT_GROUP_MESSAGE are lockreg's own.
package sql

import "embed"

// FS holds the scripts, under the paths "<dialect>/<NNNNNN>_<name>.up.sql"
// where dialect is "postgres", "mysql" or "sqlite". Reading it costs no I/O:
// the files are compiled into the binary.
//
//go:embed postgres/*.sql mysql/*.sql sqlite/*.sql
var FS embed.FS
