// Package chaos tests lockreg's safety under faults: several operating-system
// processes contending for the same keys, a holder killed with SIGKILL,
// database restarts and a PostgreSQL crash, network partitions, a process clock far from the
// database's, hostile input and resource leaks. Every test asserts that no
// update guarded by a lock is lost and that no key has two holders at once.
//
// The tests restart and stop database servers, so they are behind the build
// tag "chaos" and run as a step of their own, never beside other packages:
//
//	go test -race -count=1 -tags chaos ./internal/chaos/
//
// They use PostgreSQL at LOCKREG_POSTGRES_DSN and MariaDB/MySQL at
// LOCKREG_MYSQL_DSN (as package internal/testdb opens them), and SQLite in a
// temporary file. A test whose server is unreachable fails when CI=true and
// is skipped otherwise. The restart tests control the servers with the
// commands in LOCKREG_CHAOS_POSTGRES_STOP/START and
// LOCKREG_CHAOS_MYSQL_STOP/START, and the crash with
// LOCKREG_CHAOS_POSTGRES_CRASH (default: the stop command in immediate mode)
// (shell commands; the defaults suit a Debian host with pg_ctlcluster and
// mariadbd). The flag -soak multiplies
// counts and durations by -soak.factor (default 10) for longer runs:
//
//	go test -race -count=1 -tags chaos ./internal/chaos/ -soak -soak.factor=10
package chaos
