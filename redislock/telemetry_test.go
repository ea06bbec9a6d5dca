package redislock_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	tel "github.com/lockreg/lockreg/internal/telemetry"
	"github.com/lockreg/lockreg/internal/telemetry/telemetrytest"
	"github.com/lockreg/lockreg/internal/testdb"
	"github.com/lockreg/lockreg/redislock"
	"github.com/lockreg/lockreg/registry"
)

// The repository names its backend, region and client for the registry's
// metrics, spans and logs.
func TestDescribeNamesRedisRegionAndClient(t *testing.T) {
	c := testdb.Redis(t, "")
	r := newRepo(t, c, redislock.WithRegion("described"), redislock.WithClientID("client-1"))
	if d := r.Describe(); d != (registry.Description{Backend: "redis", Region: "described", Client: "client-1"}) {
		t.Fatalf("Describe() = %+v", d)
	}
}

// Each script the repository runs is one point of the command histogram,
// with its operation, outcome, backend and region.
func TestCommandDurationsByOperation(t *testing.T) {
	c := testdb.Redis(t, "")
	m := telemetrytest.NewMetrics()
	region := randomRegion()
	r := newRepo(t, c, redislock.WithRegion(region), redislock.WithMeterProvider(m.Provider))
	if _, ok, err := r.Acquire(ctxT(t), "k", time.Minute); !ok || err != nil {
		t.Fatalf("Acquire: %v, %v", ok, err)
	}
	if err := r.Renew(ctxT(t), "k", time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.HandedLease(ctxT(t), "k"); err != nil {
		t.Fatal(err)
	}
	if err := r.Release(ctxT(t), "k"); err != nil {
		t.Fatal(err)
	}
	if err := r.Leave(ctxT(t), "k"); err != nil {
		t.Fatal(err)
	}

	const name = "lockreg.redis.command.duration"
	if u := m.Unit(t, name); u != "s" {
		t.Errorf("unit %q, want s", u)
	}
	h, ok := m.Collect(t)[name].Data.(metricdata.Histogram[float64])
	if !ok {
		t.Fatalf("%s is no histogram: %T", name, m.Collect(t)[name].Data)
	}
	got := map[string]uint64{}
	for _, p := range h.DataPoints {
		want := attribute.NewSet(tel.Backend.String("redis"), tel.Region.String(region),
			tel.Operation.String(attrOf(t, p.Attributes, tel.Operation)), tel.Outcome.String("ok"))
		if !p.Attributes.Equals(&want) {
			t.Errorf("a point with attributes %v, want %v", p.Attributes.ToSlice(), want.ToSlice())
		}
		got[attrOf(t, p.Attributes, tel.Operation)] += p.Count
	}
	for _, op := range []string{"acquire", "renew", "handed", "release", "leave"} {
		if got[op] != 1 {
			t.Errorf("%d %s commands recorded, want 1 (all: %v)", got[op], op, got)
		}
	}
	if len(got) != 5 {
		t.Errorf("operations recorded: %v, want acquire, renew, handed, release, leave", got)
	}

	// A command that fails counts under outcome error (a renewal, which
	// leaves nothing for Close to release).
	c.Close()
	if err := r.Renew(ctxT(t), "k", time.Minute); err == nil {
		t.Fatal("Renew on a closed client succeeded")
	}
	if n := m.Count(t, name, tel.Operation.String("renew"), tel.Outcome.String("error"), tel.Region.String(region)); n != 1 {
		t.Errorf("%d failed renew commands recorded, want 1", n)
	}
}

func attrOf(t *testing.T, s attribute.Set, k attribute.Key) string {
	t.Helper()
	v, ok := s.Value(k)
	if !ok {
		t.Fatalf("a point without %s: %v", k, s.ToSlice())
	}
	return v.AsString()
}

// A pub/sub session that fails counts as a reconnection, before the error
// handler hears of it.
func TestListenerReconnectsAreCounted(t *testing.T) {
	s := startServer(t)
	m := telemetrytest.NewMetrics()
	failed := make(chan struct{}, 1)
	region := randomRegion()
	repo := newRepo(t, s.client(), redislock.WithRegion(region), redislock.WithMeterProvider(m.Provider),
		redislock.WithErrorHandler(func(error) {
			select {
			case failed <- struct{}{}:
			default:
			}
		}))
	heard := make(chan struct{}, 1)
	defer repo.Notify("k", heard)()
	<-heard // subscribed
	const name = "lockreg.redis.listener.reconnects"
	if n := m.Sum(t, name); n != 0 {
		t.Fatalf("%d reconnections before any failure", n)
	}
	if err := s.client().Do(ctxT(t), "CLIENT", "KILL", "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	<-failed
	if n := m.Sum(t, name, tel.Backend.String("redis"), tel.Region.String(region)); n < 1 {
		t.Errorf("%d reconnections counted after a failed session, want at least 1", n)
	}
	if u := m.Unit(t, name); u != "{reconnect}" {
		t.Errorf("unit %q, want {reconnect}", u)
	}
}

// Without a provider, or with the no-op one, New still works.
func TestNoopMeterProviderIsAccepted(t *testing.T) {
	for _, mp := range []redislock.Option{redislock.WithMeterProvider(nil), redislock.WithMeterProvider(noop.NewMeterProvider())} {
		c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled: New does no I/O
		defer c.Close()
		if _, err := redislock.New(c, mp); err != nil {
			t.Fatal(err)
		}
	}
}
