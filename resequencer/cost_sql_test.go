package resequencer_test

import (
	"testing"

	"github.com/lockreg/lockreg/internal/testdb"
	"github.com/lockreg/lockreg/internal/testpub"
	"github.com/lockreg/lockreg/resequencer"
)

// On PostgreSQL without Config.Locks, a message that releases nothing
// costs its Add alone: one statement, which commits on its own.
func TestAMessageThatReleasesNothingCostsOneStatementOnPostgres(t *testing.T) {
	store, counter := testdb.CountingStore(t)
	rec := testpub.NewRecorder()
	q, _ := newReseq(t, resequencer.Config{Store: store, Publisher: rec})
	for _, seq := range []int{3, 1, 4} {
		before := counter.N()
		handle(t, q, part("g", seq, 5))
		if n := counter.N() - before; n != 1 {
			t.Errorf("message %d of 5 (nothing to release) sent %d statements, want 1", seq, n)
		}
	}
	handle(t, q, part("g", 2, 5), part("g", 5, 5))
	wantSeqs(t, rec.On("out"), 1, 2, 3, 4, 5)
}
