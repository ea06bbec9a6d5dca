// Package chaos holds etcdlock's fault tests with child processes: a
// three-member etcd cluster whose members are child processes (the test
// binary re-executed as an embedded etcd member), so that a member can be
// killed with SIGKILL and restarted from its data directory, and lock
// holders that are child processes too, each recording its holds in a
// shared ledger file that the test checks for double holders and token
// regressions. The package has no code outside its tests.
package chaos
