package main

// The group scenarios' feed (messages shuffled in blocks of groups) and the
// publishers that count and check what the handlers send.

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"

	"github.com/lockreg/lockreg/aggregator"
	"github.com/lockreg/lockreg/resequencer"
)

// item is one message of the feed and the index of its group.
type item struct {
	msg   *message.Message
	group int
	seq   int
}

// buildFeed builds groups [first, first+n) of 10 messages each, shuffled
// within blocks of window groups so that groups interleave.
func buildFeed(prefix string, first, n, window int, rng *rand.Rand) []item {
	out := make([]item, 0, n*groupSize)
	for b := first; b < first+n; b += window {
		start := len(out)
		for g := b; g < min(b+window, first+n); g++ {
			key := prefix + strconv.Itoa(g)
			for s := 1; s <= groupSize; s++ {
				m := message.NewMessage(uuid.NewString(), []byte(`{"g":`+strconv.Itoa(g)+`,"s":`+strconv.Itoa(s)+`}`))
				m.Metadata.Set(aggregator.CorrelationIDKey, key)
				m.Metadata.Set(aggregator.SequenceNumberKey, strconv.Itoa(s))
				m.Metadata.Set(aggregator.SequenceSizeKey, strconv.Itoa(groupSize))
				out = append(out, item{msg: m, group: g, seq: s})
			}
		}
		block := out[start:]
		rng.Shuffle(len(block), func(i, j int) { block[i], block[j] = block[j], block[i] })
	}
	return out
}

// groupState is what the benchmark saw of one group.
type groupState struct {
	handled   atomic.Uint32 // bit s: Handle of sequence number s returned nil
	published atomic.Uint32 // resequencer: bit s: sequence number s was published
	outputs   atomic.Int32  // aggregator: outputs; resequencer: messages published
	disorder  atomic.Int32  // resequencer: a number published before a smaller one
	dups      atomic.Int32  // resequencer: a number published twice
}

// countingPub is the handlers' publisher: it counts outputs per group and
// checks the resequencer's order.
type countingPub struct {
	scenario string
	prefix   string
	states   []groupState
	total    atomic.Int64
	foreign  atomic.Int64 // outputs of no known group
}

func (p *countingPub) group(m *message.Message) *groupState {
	k := m.Metadata.Get(aggregator.CorrelationIDKey)
	if !strings.HasPrefix(k, p.prefix) {
		return nil
	}
	g, err := strconv.Atoi(k[len(p.prefix):])
	if err != nil || g < 0 || g >= len(p.states) {
		return nil
	}
	return &p.states[g]
}

func (p *countingPub) Publish(_ string, msgs ...*message.Message) error {
	for _, m := range msgs {
		p.total.Add(1)
		st := p.group(m)
		if st == nil {
			p.foreign.Add(1)
			continue
		}
		st.outputs.Add(1)
		if p.scenario != "resequencer" {
			continue
		}
		s, err := strconv.Atoi(m.Metadata.Get(resequencer.SequenceNumberKey))
		if err != nil || s < 1 || s > groupSize {
			p.foreign.Add(1)
			continue
		}
		bit := uint32(1) << s
		prev := st.published.Or(bit)
		switch {
		case prev&bit != 0:
			st.dups.Add(1)
		case prev&(bit-2) != bit-2: // not every smaller number was published
			st.disorder.Add(1)
		}
	}
	return nil
}

func (p *countingPub) Close() error { return nil }

// discardPub counts discarded messages: none are expected.
type discardPub struct{ n atomic.Int64 }

func (p *discardPub) Publish(_ string, msgs ...*message.Message) error {
	p.n.Add(int64(len(msgs)))
	return nil
}
func (p *discardPub) Close() error { return nil }

// benchLogger counts and reports the handlers' errors and drops the rest.
type benchLogger struct {
	e    *env
	name string
	errs *atomic.Int64
}

func (l benchLogger) Error(msg string, err error, f watermill.LogFields) {
	l.errs.Add(1)
	l.e.logf("%s: %s: %v %v", l.name, msg, err, f)
}
func (benchLogger) Info(string, watermill.LogFields)                   {}
func (benchLogger) Debug(string, watermill.LogFields)                  {}
func (benchLogger) Trace(string, watermill.LogFields)                  {}
func (l benchLogger) With(watermill.LogFields) watermill.LoggerAdapter { return l }
