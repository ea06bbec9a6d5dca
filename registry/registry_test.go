package registry_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/lockreg/lockreg/registry"
	"github.com/lockreg/lockreg/registry/registrytest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestLocalRegistryConformance(t *testing.T) {
	registrytest.Run(t, registrytest.Backend{})
}

func TestMemoryConformance(t *testing.T) {
	m := registrytest.NewMemory()
	registrytest.Run(t, registrytest.Backend{
		NewRepository: func(testing.TB) registry.Repository { return m.NewClient() },
		DeleteExpired: m.DeleteExpired,
		NewMissingStorage: func(testing.TB) registry.Repository {
			q := newBreakableQueue() // stays broken
			close(q.proceed)
			return q
		},
	})
}
