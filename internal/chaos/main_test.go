//go:build chaos

package chaos

import (
	"flag"
	"os"
	"testing"
)

var (
	soak       = flag.Bool("soak", false, "run longer: multiply acquisition counts and durations by -soak.factor")
	soakFactor = flag.Int("soak.factor", 10, "the multiplier -soak applies")
)

// scale multiplies a count or duration for -soak.
func scale[T ~int | ~int64](n T) T {
	if *soak {
		return n * T(max(*soakFactor, 1))
	}
	return n
}

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(m.Run())
}
