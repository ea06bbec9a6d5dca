package registry_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/lockreg/lockreg/internal/telemetry/telemetrytest"
	"github.com/lockreg/lockreg/registry"
)

// BenchmarkLocalLockUnlock measures the registry's own overhead per
// lock/unlock cycle, with a repository that does no I/O.
func BenchmarkLocalLockUnlock(b *testing.B) {
	r, err := registry.NewLocal()
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close(context.Background())
	l := r.Obtain("k")
	for b.Loop() {
		l.Lock()
		l.Unlock()
	}
}

// BenchmarkLocalLockUnlockParallel runs cycles on distinct keys from every
// goroutine, which contend only on the registry's cache.
func BenchmarkLocalLockUnlockParallel(b *testing.B) {
	r, err := registry.NewLocal()
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close(context.Background())
	var n atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		l := r.Obtain(strconv.FormatInt(n.Add(1), 10))
		for pb.Next() {
			l.Lock()
			l.Unlock()
		}
	})
}

// BenchmarkObtainDistinctKeys fills the cache with 100 000 idle locks.
func BenchmarkObtainDistinctKeys(b *testing.B) {
	keys := make([]string, 100_000)
	for i := range keys {
		keys[i] = "key-" + strconv.Itoa(i)
	}
	b.ReportAllocs()
	for b.Loop() {
		r, err := registry.NewLocal()
		if err != nil {
			b.Fatal(err)
		}
		for _, k := range keys {
			r.Obtain(k)
		}
		r.Close(context.Background())
	}
}

// BenchmarkLocalLockUnlockWithSDK is BenchmarkLocalLockUnlock with
// OpenTelemetry's SDK recording the registry's metrics (metrics) and also
// sampling every span (traces): what telemetry adds to a cycle.
func BenchmarkLocalLockUnlockWithSDK(b *testing.B) {
	for _, traces := range []bool{false, true} {
		name := "metrics"
		opts := []registry.Option{registry.WithMeterProvider(telemetrytest.NewMetrics().Provider)}
		if traces {
			name = "traces"
			opts = append(opts, registry.WithTracerProvider(telemetrytest.NewSpans().Provider))
		}
		b.Run(name, func(b *testing.B) {
			r, err := registry.NewLocal(opts...)
			if err != nil {
				b.Fatal(err)
			}
			defer r.Close(context.Background())
			l := r.Obtain("k")
			for b.Loop() {
				l.Lock()
				l.Unlock()
			}
		})
	}
}
