package clustertest

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain runs the tests, or, in a child process started by a test (its
// configuration in childEnv), the child's router until it is told to stop.
func TestMain(m *testing.M) {
	if cfg := os.Getenv(childEnv); cfg != "" {
		os.Exit(childMain(cfg))
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
