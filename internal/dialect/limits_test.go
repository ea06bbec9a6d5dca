package dialect

import (
	"strings"
	"testing"
)

func TestReadableKeepsShortValidTextAsItIs(t *testing.T) {
	for _, s := range []string{"", "orders/42", strings.Repeat("é", MaxNameLen)} {
		if got := Readable(s); got != s {
			t.Errorf("Readable(%q) = %q", s, got)
		}
	}
}

func TestReadableCutsToMaxNameLenCharacters(t *testing.T) {
	if got := Readable(strings.Repeat("é", MaxNameLen+1)); got != strings.Repeat("é", MaxNameLen) {
		t.Errorf("got %d characters, want %d", len([]rune(got)), MaxNameLen)
	}
}

func TestReadableReplacesInvalidUTF8AndDropsNUL(t *testing.T) {
	if got, want := Readable("a\xffb\x00c"), "a\uFFFDbc"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
