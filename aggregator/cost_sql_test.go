package aggregator_test

import (
	"testing"

	"github.com/lockreg/lockreg/aggregator"
	"github.com/lockreg/lockreg/internal/testdb"
)

// On PostgreSQL without Config.Locks, a message that does not complete its
// group costs its Add alone, and the one that completes it its Add and the
// release: BEGIN, a Get that locks the group row, one Update, COMMIT.
func TestAMessageCostsItsAddAndAReleaseFourStatementsOnPostgres(t *testing.T) {
	store, statements := testdb.CountingStore(t)
	a, rec := newAgg(t, aggregator.Config{Store: store})
	for i, want := range []int64{1, 1, 5} {
		before := statements.N()
		handle(t, a, part("g", i+1, 3))
		if n := statements.N() - before; n != want {
			t.Errorf("message %d of 3 sent %d statements, want %d", i+1, n, want)
		}
	}
	if got := len(rec.On("out")); got != 1 {
		t.Errorf("%d outputs, want 1", got)
	}
}
