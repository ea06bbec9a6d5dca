package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"

	"github.com/lockreg/lockreg/registry"
)

// ErrInvalidOption reports an invalid argument to [New]: a nil client or
// an option with an invalid value (a prefix or region that could name the
// keys of another repository's locks, say). The returned error wraps it
// and names the option.
var ErrInvalidOption = errors.New("etcdlock: invalid option")

// isTransient reports whether err may go away on retry: the cluster has
// no leader or is electing one, a member is stopping or overloaded, a
// request timed out inside the cluster, no endpoint is reachable, a
// keep-alive's stream ended before it was answered. Refusals
// (permission denied, an invalid argument, a request too large) are not.
func isTransient(err error) bool {
	if errors.Is(err, rpctypes.ErrNoLeader) || errors.Is(err, rpctypes.ErrLeaderChanged) ||
		errors.Is(err, rpctypes.ErrNotCapable) || errors.Is(err, rpctypes.ErrStopped) ||
		errors.Is(err, rpctypes.ErrTimeout) || errors.Is(err, rpctypes.ErrTimeoutDueToLeaderFail) ||
		errors.Is(err, rpctypes.ErrTimeoutDueToConnectionLost) || errors.Is(err, rpctypes.ErrTooManyRequests) ||
		errors.Is(err, rpctypes.ErrTimeoutWaitAppliedIndex) || errors.Is(err, clientv3.ErrNoAvailableEndpoints) ||
		errors.Is(err, errStreamEnded) {
		return true
	}
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		switch ee.Code() {
		case codes.Unavailable, codes.ResourceExhausted:
			return true
		}
		return false
	}
	if s, ok := status.FromError(err); ok {
		switch s.Code() {
		case codes.Unavailable, codes.ResourceExhausted, codes.DeadlineExceeded, codes.Aborted:
			return true
		}
	}
	return false
}

// wrap gives an etcd error its context (what, as made by opKey) and
// classification: an error wrapping ctx.Err() when ctx is done, naming the
// connection's state when no endpoint answers, a transient error, or err
// as it is.
func (r *Repository) wrap(ctx context.Context, what string, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		hint := r.unreachable()
		if errors.Is(err, ctxErr) {
			return fmt.Errorf("%s%s: %w", what, hint, err)
		}
		return fmt.Errorf("%s%s: %w: %w", what, hint, ctxErr, err)
	}
	if isTransient(err) {
		return registry.Transient(fmt.Errorf("%s%s: %w", what, r.unreachable(), err))
	}
	return fmt.Errorf("%s: %w", what, err)
}

// unreachable describes the client's connection when it is not ready, as
// when no endpoint answers, and is "" otherwise.
func (r *Repository) unreachable() string {
	conn := r.c.ActiveConnection()
	if conn == nil {
		return ""
	}
	if s := conn.GetState(); s != connectivity.Ready {
		return fmt.Sprintf(" (no etcd endpoint of %v answers: connection %s)", r.c.Endpoints(), s)
	}
	return ""
}

// maxQuotedKey bounds how much of a key error messages repeat.
const maxQuotedKey = 128

// opKey describes operation op on a caller's key for error messages.
func opKey(op, key string) string {
	q := strconv.Quote(key)
	if len(key) > maxQuotedKey {
		q = strconv.Quote(key[:maxQuotedKey]) + "...(" + strconv.Itoa(len(key)) + " bytes)"
	}
	return "etcdlock: " + op + " " + q
}

// errLost is the ErrLockLost of what.
func errLost(what, why string) error {
	return fmt.Errorf("%s: %s: %w", what, why, registry.ErrLockLost)
}
