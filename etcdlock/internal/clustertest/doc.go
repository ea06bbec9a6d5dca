// Package clustertest runs the root module's cluster tests of the
// aggregator and of the lockmw middleware (internal/clustertest there) with
// their locks in etcd: a three-member cluster in the test process, the
// routers' child processes its clients, each with an etcdlock repository
// of its own. The messages, the group store and the guard tables stay in
// PostgreSQL, as there. The harness, the children and the checks are the
// root module's internal/testharness; what differs is given to it: the
// locks (etcd_test.go), the registry's group locks only (the store's row
// locks do not use etcd), no resequencer test, the sizes (those of the
// root tests' -short runs), and two children asked for a long run each in
// the lockmw test, so that renewal is proven with few messages.
//
//	(cd etcdlock && go test -race -count=1 -v ./internal/clustertest/)
package clustertest
