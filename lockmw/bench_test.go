package lockmw_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/lockreg/lockreg/lockmw"
	"github.com/lockreg/lockreg/registry"
)

// BenchmarkPerKey measures the middleware's own cost around a handler that
// does nothing, on an in-process registry, with a key per goroutine.
func BenchmarkPerKey(b *testing.B) {
	locks, err := registry.NewLocal()
	if err != nil {
		b.Fatal(err)
	}
	defer locks.Close(context.Background())
	mw, err := lockmw.PerKey(locks, lockmw.KeyFromMetadata("entity_id"))
	if err != nil {
		b.Fatal(err)
	}
	h := mw(func(*message.Message) ([]*message.Message, error) { return nil, nil })
	var next atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		key := "entity-" + strconv.FormatInt(next.Add(1), 10)
		for pb.Next() {
			m := message.NewMessage("bench", nil)
			m.Metadata.Set("entity_id", key)
			if _, err := h(m); err != nil {
				b.Fatal(err)
			}
		}
	})
}
