package clustertest

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/lockreg/lockreg/internal/testharness"
)

// TestMain runs the tests, or, in a child process started by a test, the
// child's router until it is told to stop.
func TestMain(m *testing.M) {
	if testharness.InChild() {
		os.Exit(testharness.ChildMain(locks))
	}
	code := m.Run()
	stopEtcd()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			os.Stderr.WriteString("goleak: " + err.Error() + "\n")
			code = 1
		}
	}
	os.Exit(code)
}
