// Package settingstest checks that a group handler gives its core every
// shared setting of its Config: the copy is written out by hand, and a
// field left out would silently keep its default.
package settingstest

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockreg/lockreg/groupstore"
	"github.com/lockreg/lockreg/internal/grouphandler"
	"github.com/lockreg/lockreg/registry"
)

// CheckCopy fails t unless the handler Config C has a field of the same
// name and type for every field of grouphandler.Settings and settings
// copies each: it sets every such field of a C to a value of its own and
// compares what settings returns.
func CheckCopy[C any](t *testing.T, settings func(C) grouphandler.Settings) {
	t.Helper()
	var cfg C
	cv := reflect.ValueOf(&cfg).Elem()
	st := reflect.TypeFor[grouphandler.Settings]()
	want := make(map[string]reflect.Value, st.NumField())
	for i := range st.NumField() {
		f := st.Field(i)
		cf, ok := cv.Type().FieldByName(f.Name)
		if !ok || cf.Type != f.Type {
			t.Errorf("%s has no field %s %v", cv.Type(), f.Name, f.Type)
			continue
		}
		v, err := sample(f.Type, f.Name, i)
		if err != nil {
			t.Fatal(err)
		}
		cv.FieldByIndex(cf.Index).Set(v)
		want[f.Name] = v
	}
	got := reflect.ValueOf(settings(cfg))
	for name, w := range want {
		if g := got.FieldByName(name); !same(g, w) {
			t.Errorf("settings() does not copy %s", name)
		}
	}
}

// sample returns a value of type t that no other field i gets.
func sample(t reflect.Type, name string, i int) (reflect.Value, error) {
	var v any
	switch t {
	case reflect.TypeFor[string]():
		v = name
	case reflect.TypeFor[time.Duration]():
		v = time.Duration(i + 1)
	case reflect.TypeFor[func(*message.Message) string]():
		v = func(*message.Message) string { return name }
	case reflect.TypeFor[func(groupstore.Group, *message.Message) time.Duration]():
		v = func(groupstore.Group, *message.Message) time.Duration { return time.Duration(i + 1) }
	case reflect.TypeFor[message.Publisher]():
		v = &publisher{name}
	case reflect.TypeFor[groupstore.Store]():
		v = groupstore.NewMemory()
	case reflect.TypeFor[registry.LockRegistry]():
		v = locks{name}
	case reflect.TypeFor[watermill.LoggerAdapter]():
		v = watermill.NewCaptureLogger()
	case reflect.TypeFor[metric.MeterProvider]():
		v = sdkmetric.NewMeterProvider()
	case reflect.TypeFor[trace.TracerProvider]():
		v = sdktrace.NewTracerProvider()
	default:
		return reflect.Value{}, fmt.Errorf("settingstest: no sample value of %v (field %s): add one", t, name)
	}
	return reflect.ValueOf(v), nil
}

// same reports whether got is the sample w: funcs by what they return,
// everything else by identity or value.
func same(got, w reflect.Value) bool {
	if w.Kind() == reflect.Func {
		if got.IsNil() {
			return false
		}
		in := make([]reflect.Value, w.Type().NumIn())
		for i := range in {
			in[i] = reflect.Zero(w.Type().In(i))
		}
		return got.Call(in)[0].Interface() == w.Call(in)[0].Interface()
	}
	return got.Interface() == w.Interface()
}

type publisher struct{ name string }

func (*publisher) Publish(string, ...*message.Message) error { return nil }
func (*publisher) Close() error                              { return nil }

type locks struct{ name string }

func (locks) Obtain(string) registry.Lock { return nil }
