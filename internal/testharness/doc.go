// Package testharness holds test code that the root module's tests and the
// etcdlock module's share: a module's test files cannot be imported, and
// Go's internal rule lets github.com/lockreg/lockreg/etcdlock import this
// package.
//
//   - Proxy is a TCP proxy that can cut its connections, for the partition
//     tests of internal/chaos and etcdlock/internal/chaos.
//   - AggregatorTest, ResequencerTest and PerKeyTest are the cluster tests
//     of the aggregator, the resequencer and the lockmw middleware
//     (internal/clustertest, etcdlock/internal/clustertest): routers in
//     child processes (the test binary re-executed; its TestMain calls
//     ChildMain when InChild) consume one watermill-sql topic on
//     PostgreSQL as competing consumers, and the test process kills,
//     pauses and checks them. What differs between the two packages comes
//     in as parameters: where the locks are (ClusterConfig.Locks: the lock
//     table in PostgreSQL, or an etcd cluster), the sizes, and the children
//     asked for extra long runs (PerKeyTest.RenewRuns).
//
// It is a package of test code: only tests import it, and it fails them
// through testing.TB. The cluster tests use PostgreSQL at
// LOCKREG_POSTGRES_DSN (see internal/testdb); when it is unreachable they
// fail if CI=true and are skipped otherwise.
package testharness
