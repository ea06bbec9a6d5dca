package chaos

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// childEnv names a child process's job: "member" (an etcd member, see
// cluster_test.go), "cycle" or "hold" (a lock holder, see holder_test.go).
// A child runs its job from TestMain and exits; it never runs the tests.
const childEnv = "LOCKREG_ETCD_CHAOS_CHILD"

func TestMain(m *testing.M) {
	if mode := os.Getenv(childEnv); mode != "" {
		var err error
		switch mode {
		case "member":
			err = runMember()
		case "cycle", "hold":
			err = runHolder(mode)
		default:
			err = fmt.Errorf("unknown child mode %q", mode)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "child %s: %v\n", mode, err)
			os.Exit(2)
		}
		os.Exit(0)
	}
	// The children are other processes: the parent's goroutines are its
	// clients', its proxies' and its child watchers', all ended by the
	// tests' clean-ups.
	goleak.VerifyTestMain(m)
}
