package aggregator_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/lockreg/lockreg/aggregator"
	"github.com/lockreg/lockreg/groupstore"
)

// plain returns a message of group key with a correlation id and nothing
// else, as Watermill's own components make them.
func plain(key, uuid string) *message.Message {
	m := message.NewMessage(uuid, []byte(`"`+uuid+`"`))
	m.Metadata.Set("correlation_id", key)
	return m
}

// sequenceSizeReports returns the logged reports of messages without a
// sequence size, by group.
func sequenceSizeReports(logs *watermill.CaptureLoggerAdapter) map[string]int {
	got := map[string]int{}
	for _, msgs := range logs.Captured() {
		for _, c := range msgs {
			if errors.Is(c.Err, aggregator.ErrNoSequenceSize) {
				got[c.Fields["group"].(string)]++
			}
		}
	}
	return got
}

func TestMessagesWithoutSequenceSizeAreReportedOncePerGroup(t *testing.T) {
	logs := watermill.NewCaptureLogger()
	a, rec := newAgg(t, aggregator.Config{Logger: logs})
	handle(t, a, plain("a", "a1"), plain("b", "b1"), plain("a", "a2"), plain("b", "b2"), plain("a", "a3"), plain("b", "b3"))
	if got := sequenceSizeReports(logs); len(got) != 2 || got["a"] != 1 || got["b"] != 1 {
		t.Errorf("reports by group %v, want one for a and one for b; log %v", got, logs.Captured())
	}
	for _, c := range logs.Captured()[watermill.ErrorLogLevel] {
		if errors.Is(c.Err, aggregator.ErrNoSequenceSize) && c.Fields["outcome"] == nil {
			t.Errorf("report %q does not say what becomes of the group", c.Msg)
		}
	}
	if out := rec.On("out"); len(out) != 0 {
		t.Errorf("released %d groups without sequence sizes", len(out))
	}
}

func TestMessagesWithSequenceSizeAreNotReported(t *testing.T) {
	logs := watermill.NewCaptureLogger()
	a, _ := newAgg(t, aggregator.Config{Logger: logs})
	handle(t, a, part("s", 1, 3), part("s", 2, 3))
	if got := sequenceSizeReports(logs); len(got) != 0 {
		t.Errorf("reports %v for messages with a sequence size", got)
	}
}

func TestStrategiesThatNeedNoSequenceSizeDoNotReportItsAbsence(t *testing.T) {
	logs := watermill.NewCaptureLogger()
	a, rec := newAgg(t, aggregator.Config{Logger: logs, Release: aggregator.ReleaseOnCount(3)})
	handle(t, a, plain("c", "c1"), plain("c", "c2"), plain("c", "c3"))
	if got := sequenceSizeReports(logs); len(got) != 0 {
		t.Errorf("reports %v under ReleaseOnCount", got)
	}
	if out := rec.On("out"); len(out) != 1 || string(out[0].Payload) != `["c1","c2","c3"]` {
		t.Errorf("outputs %v, want the three plain messages", out)
	}
}

// defaultsNotes returns the logged notes that the handler runs on its
// in-memory defaults.
func defaultsNotes(logs *watermill.CaptureLoggerAdapter) []watermill.CapturedMessage {
	var notes []watermill.CapturedMessage
	for _, msgs := range logs.Captured() {
		for _, c := range msgs {
			if strings.Contains(c.Msg, "Config.Store") || strings.Contains(c.Msg, "Config.Locks") {
				notes = append(notes, c)
			}
		}
	}
	return notes
}

func TestInMemoryDefaultsAreLoggedOnceAtInfo(t *testing.T) {
	logs := watermill.NewCaptureLogger()
	a, _ := newAgg(t, aggregator.Config{Logger: logs, Release: aggregator.ReleaseOnCount(5)})
	handle(t, a, plain("d", "d1"), plain("d", "d2"))
	runTimeouts(t, a)
	handle(t, a, plain("d", "d3"))
	notes := defaultsNotes(logs)
	if len(notes) != 1 {
		t.Fatalf("%d notes on the defaults, want 1: %v", len(notes), logs.Captured())
	}
	if notes[0].Level != watermill.InfoLogLevel {
		t.Errorf("note at level %v, want info", notes[0].Level)
	}
	for _, want := range []string{"Config.Store", "Config.Locks", "memory", "single-instance"} {
		if !strings.Contains(notes[0].Msg, want) {
			t.Errorf("note %q does not mention %q", notes[0].Msg, want)
		}
	}
}

func TestDefaultLocksAloneAreLogged(t *testing.T) {
	logs := watermill.NewCaptureLogger()
	a, _ := newAgg(t, aggregator.Config{Logger: logs, Store: groupstore.NewMemory()})
	handle(t, a, plain("e", "e1"))
	notes := defaultsNotes(logs)
	if len(notes) != 1 || !strings.Contains(notes[0].Msg, "Config.Locks") || strings.Contains(notes[0].Msg, "Config.Store") {
		t.Errorf("notes %v, want one on Config.Locks only", notes)
	}
}

func TestConfiguredStoreAndLocksAreNotLoggedAsDefaults(t *testing.T) {
	logs := watermill.NewCaptureLogger()
	a, _ := newAgg(t, aggregator.Config{Logger: logs, Store: groupstore.NewMemory(), Locks: newLocal(t)})
	handle(t, a, plain("f", "f1"))
	if notes := defaultsNotes(logs); len(notes) != 0 {
		t.Errorf("notes %v with Store and Locks set", notes)
	}
}

func TestLaterMessageWithoutSequenceSizeIsDiscardedWhenItsGroupIsReleased(t *testing.T) {
	a, rec := newAgg(t, aggregator.Config{DiscardTopic: "discard"})
	handle(t, a, part("m", 1, 2), plain("m", "m-plain"), part("m", 2, 2))
	if d := rec.On("discard"); len(d) != 1 || d[0].UUID != "m-plain" {
		t.Fatalf("discards %v, want the message without a size", d)
	}
	if out := rec.On("out"); len(out) != 1 || string(out[0].Payload) != `[{"item":1},{"item":2}]` {
		t.Fatalf("outputs %v, want the sequence of size 2", out)
	}
}
