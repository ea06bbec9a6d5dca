// Package testpub is the publisher lockreg's tests publish to: a Recorder
// keeps what it is given and can be made to fail or to hold publishes, and
// UntilDone stands for a publish that only the end of its message's context
// stops. It is imported by tests only.
package testpub

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
)

// ErrPublish is the error of the publishes a Recorder is told to fail.
var ErrPublish = errors.New("testpub: publish failed")

// Recorder is a message.Publisher that keeps the messages it is given, by
// topic, in Publish order. It is safe for concurrent use; make one with
// NewRecorder.
type Recorder struct {
	mu       sync.Mutex
	msgs     map[string][]*message.Message // by topic
	failNext int
	failed   []string // UUIDs of failed publishes
	hold     chan struct{}
	changed  chan struct{} // signalled after each kept publish
}

// NewRecorder returns an empty Recorder.
func NewRecorder() *Recorder {
	return &Recorder{msgs: map[string][]*message.Message{}, changed: make(chan struct{}, 1)}
}

// Publish keeps msgs under topic, or fails with ErrPublish, keeping
// nothing, while FailNext's count lasts; while held (Hold) it waits first.
func (r *Recorder) Publish(topic string, msgs ...*message.Message) error {
	r.mu.Lock()
	hold := r.hold
	r.mu.Unlock()
	if hold != nil {
		<-hold
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.failNext > 0 {
		r.failNext--
		for _, m := range msgs {
			r.failed = append(r.failed, m.UUID)
		}
		return ErrPublish
	}
	r.msgs[topic] = append(r.msgs[topic], msgs...)
	select {
	case r.changed <- struct{}{}:
	default:
	}
	return nil
}

// Close does nothing: a Recorder holds no resources.
func (r *Recorder) Close() error { return nil }

// FailNext makes the next n publishes fail with ErrPublish.
func (r *Recorder) FailNext(n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failNext = n
}

// Failed returns the UUIDs of the messages of the publishes that failed.
func (r *Recorder) Failed() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.failed)
}

// Hold makes every Publish from now on wait until release is called.
func (r *Recorder) Hold() (release func()) {
	c := make(chan struct{})
	r.mu.Lock()
	r.hold = c
	r.mu.Unlock()
	return sync.OnceFunc(func() { close(c) })
}

// On returns the messages published to topic so far.
func (r *Recorder) On(topic string) []*message.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.msgs[topic])
}

// WaitFor waits until topic holds n messages and returns them, failing t
// after 10 s.
func (r *Recorder) WaitFor(t testing.TB, topic string, n int) []*message.Message {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		if got := r.On(topic); len(got) >= n {
			return got
		}
		select {
		case <-r.changed:
		case <-time.After(10 * time.Millisecond):
		case <-deadline:
			t.Fatalf("topic %s: got %d messages, want %d", topic, len(r.On(topic)), n)
		}
	}
}

// ErrNotStopped is what UntilDone returns when the message's context did
// not end within 10 s.
var ErrNotStopped = errors.New("testpub: publish was not stopped by the end of its context")

// UntilDone is a message.Publisher whose Publish blocks until the first
// message's context ends and returns its cause (context.Cause), or
// ErrNotStopped after 10 s.
type UntilDone struct{}

// Publish waits for the end of msgs[0]'s context.
func (UntilDone) Publish(_ string, msgs ...*message.Message) error {
	ctx := msgs[0].Context()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-time.After(10 * time.Second):
		return ErrNotStopped
	}
}

// Close does nothing.
func (UntilDone) Close() error { return nil }
