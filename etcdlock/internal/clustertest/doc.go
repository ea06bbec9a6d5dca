// Package clustertest runs the root module's cluster tests of the
// aggregator and of the lockmw middleware (internal/clustertest there,
// copied: its files are tests of another module) with their locks in etcd:
// a three-member cluster in the test process, the routers' child processes
// its clients, each with an etcdlock repository of its own. The messages,
// the group store and the guard tables stay in PostgreSQL, as there. The
// sizes are those of the root tests' -short runs. What differs from the
// copied files: childConfig.Endpoints, newEtcdRepository instead of
// jdbc.NewLockRepository, the registry's group locks only (the store's row
// locks do not use etcd), no resequencer test, the sizes, and etcd_test.go.
//
//	(cd etcdlock && go test -race -count=1 -v ./internal/clustertest/)
package clustertest
