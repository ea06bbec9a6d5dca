package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// The stale holder's write is refused and the newer holder's survives.
func TestExampleRefusesTheStaleHoldersWrite(t *testing.T) {
	var out strings.Builder
	if err := run(context.Background(), &out, "sqlite:"+filepath.Join(t.TempDir(), "fencing.db")); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	for _, want := range []string{
		"greater token (true), adds 100: accepted",
		"adds 10 with its old token: refused",
		"unlock says the lease was lost: true",
		"final balance: 100\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
}
