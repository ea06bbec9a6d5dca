package groupstore_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/lockreg/lockreg/groupstore"
	"github.com/lockreg/lockreg/groupstore/groupstoretest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestMemoryConformance(t *testing.T) {
	groupstoretest.Run(t, func(*testing.T) groupstore.Store { return groupstore.NewMemory() })
}
