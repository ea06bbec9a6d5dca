// Package clustertest holds the cluster tests of the aggregator, the
// resequencer and the lockmw middleware: four routers, each a child
// operating-system process (the test binary re-executed), consume one
// watermill-sql topic on PostgreSQL as competing consumers, with their own
// connection pools, lock repositories (client ids), registries and
// group-store handles on one region. The parent publishes shuffled input
// with duplicate deliveries, kills one child with SIGKILL mid-run, and
// checks the output and discard topics: every group released once
// (aggregator) or complete and in order (resequencer), nothing lost, late
// messages discarded. The lockmw test (perkey_test.go) also pauses a child
// with SIGSTOP and checks a fenced guard table instead of outputs.
//
// The locks are in the lock table of the same PostgreSQL (jdbc, with a
// listener). The harness, children and checks are in internal/testharness,
// shared with etcdlock/internal/clustertest, which runs the aggregator and
// lockmw tests with their locks in etcd; the package has no code of its own
// outside its tests. The tests use PostgreSQL at LOCKREG_POSTGRES_DSN
// (default postgres://postgres@127.0.0.1:5432/test?sslmode=disable); when
// it is unreachable they fail if CI=true and are skipped otherwise. With
// -short they run on a tenth of the messages.
//
//	go test -race -count=1 -v ./internal/clustertest/
package clustertest
