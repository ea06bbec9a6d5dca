package sequence

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
)

// Metadata keys. The first three are those the aggregator and the
// resequencer read by default.
const (
	// CorrelationIDKey is the correlation id of a part: the UUID of the
	// message it was split from. It is the key of Watermill's
	// CorrelationID middleware.
	CorrelationIDKey = "correlation_id"
	// NumberKey is a part's 1-based position among its split's parts.
	NumberKey = "sequence_number"
	// SizeKey is the number of parts of a part's split.
	SizeKey = "sequence_size"
	// DetailsKey holds the stack of the sequences that enclose a part's
	// (see the package doc).
	DetailsKey = "sequence_details"
)

// ErrInvalidDetails reports a DetailsKey value that is not a JSON array of
// frames; the error wrapping it quotes the value.
var ErrInvalidDetails = errors.New("sequence: invalid sequence details")

// frame is one enclosing sequence: the values the split message had under
// the three keys, omitted when it had none.
type frame struct {
	CorrelationID *string `json:"correlation_id,omitempty"`
	Number        *string `json:"sequence_number,omitempty"`
	Size          *string `json:"sequence_size,omitempty"`
}

// fields pairs the keys with a frame's fields.
func (f *frame) fields() [3]struct {
	key string
	val **string
} {
	return [3]struct {
		key string
		val **string
	}{{CorrelationIDKey, &f.CorrelationID}, {NumberKey, &f.Number}, {SizeKey, &f.Size}}
}

// details reads the stack of md: nil, nil without one.
func details(md message.Metadata) ([]frame, error) {
	raw, ok := md[DetailsKey]
	if !ok || raw == "" {
		return nil, nil
	}
	var stack []frame
	if err := json.Unmarshal([]byte(raw), &stack); err != nil {
		return nil, fmt.Errorf("%w: %s %q: %w", ErrInvalidDetails, DetailsKey, raw, err)
	}
	return stack, nil
}

// Push makes md the metadata of part number (1-based) of size parts of a
// split whose correlation id is correlationID. If md already has a
// CorrelationIDKey, its three sequence keys are first saved as a frame on
// top of its DetailsKey stack (Spring's pushSequenceDetails). It returns an
// error wrapping ErrInvalidDetails, and changes nothing, if md's DetailsKey
// is not a valid stack.
func Push(md message.Metadata, correlationID string, number, size int) error {
	stack, err := details(md)
	if err != nil {
		return err
	}
	if _, ok := md[CorrelationIDKey]; ok {
		var f frame
		for _, kv := range f.fields() {
			if v, ok := md[kv.key]; ok {
				*kv.val = &v
			}
		}
		b, err := json.Marshal(append(stack, f))
		if err != nil {
			return err // cannot happen: strings marshal
		}
		md[DetailsKey] = string(b)
	}
	md[CorrelationIDKey] = correlationID
	md[NumberKey] = strconv.Itoa(number)
	md[SizeKey] = strconv.Itoa(size)
	return nil
}

// Pop restores in md the sequence of the level above: it takes the top
// frame of md's DetailsKey stack, sets the three sequence keys to its
// values (deleting those it lacks), and leaves the rest of the stack under
// DetailsKey, or deletes the key when none is left (Spring's
// popSequenceDetails). Without a stack it changes nothing. It returns an
// error wrapping ErrInvalidDetails, and changes nothing, if the stack is
// invalid.
func Pop(md message.Metadata) error {
	stack, err := details(md)
	if err != nil || len(stack) == 0 {
		return err
	}
	f := stack[len(stack)-1]
	for _, kv := range f.fields() {
		if v := *kv.val; v != nil {
			md[kv.key] = *v
		} else {
			delete(md, kv.key)
		}
	}
	if rest := stack[:len(stack)-1]; len(rest) > 0 {
		b, err := json.Marshal(rest)
		if err != nil {
			return err // cannot happen: strings marshal
		}
		md[DetailsKey] = string(b)
	} else {
		delete(md, DetailsKey)
	}
	return nil
}

// namespace seeds the UUIDs of parts.
var namespace = uuid.NewSHA1(uuid.NameSpaceURL, []byte("https://github.com/lockreg/lockreg/sequence"))

// Split returns the parts of parent, one per payload in order: each has a
// copy of parent's metadata made into part i of len(payloads) by [Push]
// with parent's UUID as the correlation id, parent's context, and a
// name-based UUID of parent's UUID and i, so that splitting a redelivered
// parent gives the same UUIDs. It returns an error wrapping
// ErrInvalidDetails if parent's DetailsKey is invalid, and no parts for no
// payloads.
func Split(parent *message.Message, payloads ...message.Payload) ([]*message.Message, error) {
	parts := make([]*message.Message, len(payloads))
	for i, p := range payloads {
		m := message.NewMessage(uuid.NewSHA1(namespace, []byte(parent.UUID+"/"+strconv.Itoa(i+1))).String(), p)
		for k, v := range parent.Metadata {
			m.Metadata[k] = v
		}
		if err := Push(m.Metadata, parent.UUID, i+1, len(payloads)); err != nil {
			return nil, err
		}
		m.SetContext(parent.Context())
		parts[i] = m
	}
	return parts, nil
}
