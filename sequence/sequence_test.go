package sequence_test

import (
	"errors"
	"maps"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/lockreg/lockreg/sequence"
)

func TestSplitNumbersThePartsAndCopiesTheMetadata(t *testing.T) {
	parent := message.NewMessage("order-1", nil)
	parent.Metadata.Set("tenant", "t1")
	parts, err := sequence.Split(parent, []byte("a"), []byte("b"))
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range parts {
		want := message.Metadata{"tenant": "t1", sequence.CorrelationIDKey: "order-1",
			sequence.NumberKey: []string{"1", "2"}[i], sequence.SizeKey: "2"}
		if !maps.Equal(p.Metadata, want) {
			t.Errorf("part %d metadata %v, want %v", i, p.Metadata, want)
		}
	}
}

func TestSplitOfAMessageWithoutCorrelationIDPushesNoDetails(t *testing.T) {
	parts, err := sequence.Split(message.NewMessage("m", nil), []byte("a"))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := parts[0].Metadata[sequence.DetailsKey]; ok {
		t.Errorf("details %q on a top-level part", parts[0].Metadata[sequence.DetailsKey])
	}
}

func TestSplitOfAPartPushesItsSequence(t *testing.T) {
	outer, err := sequence.Split(message.NewMessage("order-1", nil), []byte("x"), []byte("y"))
	if err != nil {
		t.Fatal(err)
	}
	inner, err := sequence.Split(outer[1], []byte("y1"))
	if err != nil {
		t.Fatal(err)
	}
	got := inner[0].Metadata.Get(sequence.DetailsKey)
	if want := `[{"correlation_id":"order-1","sequence_number":"2","sequence_size":"2"}]`; got != want {
		t.Errorf("details %s, want %s", got, want)
	}
	if inner[0].Metadata.Get(sequence.CorrelationIDKey) != outer[1].UUID {
		t.Errorf("correlation %q, want the outer part's UUID", inner[0].Metadata.Get(sequence.CorrelationIDKey))
	}
}

func TestSplitOfARedeliveredMessageGivesTheSameUUIDs(t *testing.T) {
	a, _ := sequence.Split(message.NewMessage("m", nil), []byte("a"), []byte("b"))
	b, _ := sequence.Split(message.NewMessage("m", nil), []byte("a"), []byte("b"))
	if a[0].UUID != b[0].UUID || a[1].UUID != b[1].UUID || a[0].UUID == a[1].UUID {
		t.Errorf("UUIDs %s %s and %s %s", a[0].UUID, a[1].UUID, b[0].UUID, b[1].UUID)
	}
}

func TestPopRestoresTheOuterSequenceAndDropsAnEmptyStack(t *testing.T) {
	md := message.Metadata{"tenant": "t1", sequence.CorrelationIDKey: "outer", sequence.NumberKey: "2", sequence.SizeKey: "3"}
	if err := sequence.Push(md, "inner", 1, 4); err != nil {
		t.Fatal(err)
	}
	if err := sequence.Pop(md); err != nil {
		t.Fatal(err)
	}
	want := message.Metadata{"tenant": "t1", sequence.CorrelationIDKey: "outer", sequence.NumberKey: "2", sequence.SizeKey: "3"}
	if !maps.Equal(md, want) {
		t.Errorf("metadata %v, want %v", md, want)
	}
}

func TestPopKeepsTheFramesAboveTheTopOne(t *testing.T) {
	md := message.Metadata{sequence.CorrelationIDKey: "l0", sequence.NumberKey: "1", sequence.SizeKey: "1"}
	for _, c := range []string{"l1", "l2"} {
		if err := sequence.Push(md, c, 1, 2); err != nil {
			t.Fatal(err)
		}
	}
	if err := sequence.Pop(md); err != nil {
		t.Fatal(err)
	}
	if md.Get(sequence.CorrelationIDKey) != "l1" || md.Get(sequence.DetailsKey) == "" {
		t.Fatalf("after one pop %v, want l1 with l0 still stacked", md)
	}
	if err := sequence.Pop(md); err != nil {
		t.Fatal(err)
	}
	if md.Get(sequence.CorrelationIDKey) != "l0" || md.Get(sequence.DetailsKey) != "" {
		t.Errorf("after two pops %v, want l0 and no stack", md)
	}
}

func TestPopDeletesTheKeysTheSplitMessageLacked(t *testing.T) {
	md := message.Metadata{sequence.CorrelationIDKey: "only-correlation"}
	if err := sequence.Push(md, "inner", 1, 2); err != nil {
		t.Fatal(err)
	}
	if err := sequence.Pop(md); err != nil {
		t.Fatal(err)
	}
	if want := (message.Metadata{sequence.CorrelationIDKey: "only-correlation"}); !maps.Equal(md, want) {
		t.Errorf("metadata %v, want %v", md, want)
	}
}

func TestPopWithoutDetailsChangesNothing(t *testing.T) {
	md := message.Metadata{sequence.CorrelationIDKey: "c", sequence.NumberKey: "1"}
	if err := sequence.Pop(md); err != nil {
		t.Fatal(err)
	}
	if want := (message.Metadata{sequence.CorrelationIDKey: "c", sequence.NumberKey: "1"}); !maps.Equal(md, want) {
		t.Errorf("metadata %v", md)
	}
}

func TestInvalidDetailsAreAnErrorAndChangeNothing(t *testing.T) {
	for _, f := range []func(message.Metadata) error{
		sequence.Pop,
		func(md message.Metadata) error { return sequence.Push(md, "x", 1, 1) },
	} {
		md := message.Metadata{sequence.CorrelationIDKey: "c", sequence.DetailsKey: "not json"}
		if err := f(md); !errors.Is(err, sequence.ErrInvalidDetails) {
			t.Errorf("error %v, want ErrInvalidDetails", err)
		}
		if md.Get(sequence.CorrelationIDKey) != "c" {
			t.Errorf("metadata changed: %v", md)
		}
	}
}
