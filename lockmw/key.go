package lockmw

import (
	"context"

	"github.com/ThreeDotsLabs/watermill/message"
)

// A KeyFunc returns the key of a message: messages of one key are handled
// one at a time. An empty key with a nil error means the message has none
// (see [WithMissingKey]); an error makes the middleware fail the message
// with an error wrapping [ErrNoKey] and the function's error.
type KeyFunc func(*message.Message) (string, error)

// KeyFromMetadata returns a KeyFunc that reads the metadata entry name; a
// message without it has no key.
func KeyFromMetadata(name string) KeyFunc {
	return func(m *message.Message) (string, error) { return m.Metadata.Get(name), nil }
}

// KeyFromPayload returns a KeyFunc that applies f to the payload, for
// example to read a field of a JSON document. It returns nil for a nil f,
// which [PerKey] refuses.
func KeyFromPayload(f func(payload []byte) (string, error)) KeyFunc {
	if f == nil {
		return nil
	}
	return func(m *message.Message) (string, error) { return f(m.Payload) }
}

type tokenKey struct{}

// Token returns the fencing token of the lock hold the handler runs under,
// from the message's context (msg.Context(), or a context derived from
// it), and true; it returns false for a context of no hold, such as that
// of a message run [RunWithoutLock]. The token is greater than that of
// every earlier hold of the key, in any instance: pass it to the storage
// the handler writes to and let it refuse writes with a token lower than
// the last it saw. It is 0 when the registry's repository issues no
// tokens.
func Token(ctx context.Context) (int64, bool) {
	t, ok := ctx.Value(tokenKey{}).(int64)
	return t, ok
}
