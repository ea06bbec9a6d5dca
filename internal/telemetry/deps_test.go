package telemetry_test

import (
	"os/exec"
	"strings"
	"testing"
)

// The library's packages use OpenTelemetry's API only: the SDK and the
// Prometheus exporter are for applications, examples and tests.
func TestLibraryPackagesDependOnTheAPIOnly(t *testing.T) {
	pkgs := []string{"registry", "jdbc", "tasklock", "leader", "lockmw", "aggregator", "resequencer",
		"groupstore/...", "jdbc/pgxlisten", "jdbc/pqlisten", "redislock"}
	args := []string{"list", "-deps"}
	for _, p := range pkgs {
		args = append(args, "github.com/lockreg/lockreg/"+p)
	}
	out, err := exec.Command("go", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	sawAPI := false
	for dep := range strings.FieldsSeq(string(out)) {
		switch {
		case strings.HasPrefix(dep, "go.opentelemetry.io/otel/sdk"),
			strings.HasPrefix(dep, "go.opentelemetry.io/otel/exporters"),
			strings.HasPrefix(dep, "github.com/prometheus/"):
			t.Errorf("a library package depends on %s", dep)
		case dep == "go.opentelemetry.io/otel/metric":
			sawAPI = true
		}
	}
	if !sawAPI {
		t.Error("no library package depends on go.opentelemetry.io/otel/metric: the check checks nothing")
	}
}
