package resequencer_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/lockreg/lockreg/internal/testpub"
	"github.com/lockreg/lockreg/resequencer"
)

// infoLog is a logger that keeps its info lines and those of the loggers
// made from it with With. Unlike watermill.CaptureLoggerAdapter it may be
// read while a router still logs.
type infoLog struct {
	fields watermill.LogFields
	mu     *sync.Mutex
	lines  *[]watermill.CapturedMessage
}

func newInfoLog() infoLog {
	return infoLog{mu: &sync.Mutex{}, lines: new([]watermill.CapturedMessage)}
}

func (l infoLog) Error(string, error, watermill.LogFields) {}
func (l infoLog) Debug(string, watermill.LogFields)        {}
func (l infoLog) Trace(string, watermill.LogFields)        {}

func (l infoLog) Info(msg string, fields watermill.LogFields) {
	l.mu.Lock()
	defer l.mu.Unlock()
	*l.lines = append(*l.lines, watermill.CapturedMessage{Level: watermill.InfoLogLevel, Msg: msg, Fields: l.fields.Add(fields)})
}

func (l infoLog) With(fields watermill.LogFields) watermill.LoggerAdapter {
	l.fields = l.fields.Add(fields)
	return l
}

// containing returns the info lines that contain s.
func (l infoLog) containing(s string) []watermill.CapturedMessage {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []watermill.CapturedMessage
	for _, c := range *l.lines {
		if strings.Contains(c.Msg, s) {
			out = append(out, c)
		}
	}
	return out
}

func TestInMemoryDefaultsAreLoggedOnceToTheRoutersLogger(t *testing.T) {
	logs := newInfoLog()
	in := gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, watermill.NopLogger{})
	defer in.Close()
	r, err := message.NewRouter(message.RouterConfig{}, logs)
	if err != nil {
		t.Fatal(err)
	}
	rec := testpub.NewRecorder()
	q, err := resequencer.New(resequencer.Config{Publisher: rec, OutputTopic: "out"})
	if err != nil {
		t.Fatal(err)
	}
	q.AddHandler(r, "steps", "steps", in)
	done := make(chan struct{})
	go func() { defer close(done); r.Run(context.Background()) }()
	<-r.Running()
	// Publish returns once the handler acked, so the message was handled.
	if err := in.Publish("steps", part("g", 1, 2), part("g", 2, 2)); err != nil {
		t.Fatal(err)
	}
	r.Close()
	<-done
	if got := len(rec.On("out")); got != 2 {
		t.Fatalf("released %d messages, want 2", got)
	}

	notes := logs.containing("Config.Store")
	if len(notes) != 1 {
		t.Fatalf("%d notes on the defaults, want 1: %v", len(notes), notes)
	}
	n := notes[0]
	if n.Fields["resequencer"] != "steps" ||
		!strings.Contains(n.Msg, "Config.Locks") || !strings.Contains(n.Msg, "single-instance") {
		t.Errorf("note %+v, want one line on Store and Locks naming the handler", n)
	}
}
