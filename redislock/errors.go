package redislock

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"syscall"

	"github.com/redis/go-redis/v9"

	"github.com/lockreg/lockreg/registry"
)

// ErrInvalidOption reports an invalid argument to [New]: a nil client or
// an option with an invalid value. The returned error wraps it and names
// the option.
var ErrInvalidOption = errors.New("redislock: invalid option")

// isTransient reports whether err may go away on retry: a connection that
// failed or could not be made, a pool with no free connection, and the
// server replies that say "not now": LOADING (a restarted server reads its
// data), BUSY (a script runs too long), TRYAGAIN, CLUSTERDOWN, MASTERDOWN,
// READONLY (the node became a replica in a failover), NOREPLICAS, OOM and
// the limit of clients. Replies are told apart by their error code, the
// reply's first word, never by the rest of the message.
func isTransient(err error) bool {
	if errors.Is(err, redis.ErrClosed) { // the caller closed its client
		return false
	}
	var reply redis.Error
	if errors.As(err, &reply) {
		msg := reply.Error()
		code, _, _ := strings.Cut(msg, " ")
		switch code {
		case "LOADING", "BUSY", "TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN", "READONLY", "NOREPLICAS", "OOM":
			return true
		}
		return msg == "ERR max number of clients reached" // its code, ERR, says nothing
	}
	if errors.Is(err, redis.ErrPoolTimeout) || errors.Is(err, redis.ErrPoolExhausted) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, net.ErrClosed) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne)
}

// wrap gives a Redis error its context (what, as made by opKey) and
// classification: an error wrapping ctx.Err() when ctx is done, a transient
// error, or err as it is.
func wrap(ctx context.Context, what string, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		if errors.Is(err, ctxErr) {
			return fmt.Errorf("%s: %w", what, err)
		}
		return fmt.Errorf("%s: %w: %w", what, ctxErr, err)
	}
	if isTransient(err) {
		return registry.Transient(fmt.Errorf("%s: %w", what, err))
	}
	return fmt.Errorf("%s: %w", what, err)
}

// maxQuotedKey bounds how much of a key error messages repeat.
const maxQuotedKey = 128

// opKey describes operation op on a caller's key for error messages.
func opKey(op, key string) string {
	q := strconv.Quote(key)
	if len(key) > maxQuotedKey {
		q = strconv.Quote(key[:maxQuotedKey]) + "...(" + strconv.Itoa(len(key)) + " bytes)"
	}
	return "redislock: " + op + " " + q
}
