// Package testharness holds test code that the root module's tests and the
// etcdlock module's share: a module's test files cannot be imported, and
// Go's internal rule lets github.com/lockreg/lockreg/etcdlock import this
// package. Proxy is a TCP proxy that can cut its connections, for the
// partition tests of internal/chaos and etcdlock/internal/chaos.
//
// It is a package of test code: only tests import it, and it fails them
// through testing.TB.
package testharness
