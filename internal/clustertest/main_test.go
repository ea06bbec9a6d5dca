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
	goleak.VerifyTestMain(m)
}
