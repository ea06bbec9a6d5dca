package leader

import "context"

// A Term is one period of leadership of a [Candidate]: from the grant of
// the lease to the moment the candidate stops counting itself the leader.
// It is safe for concurrent use and stays readable after it ends.
type Term struct {
	role   string
	token  int64
	lease  <-chan struct{} // the hold's Done
	ctx    context.Context
	cancel context.CancelCauseFunc
}

// Role returns the role the term leads.
func (t *Term) Role() string { return t.role }

// Token returns the fencing token of the term's lease: greater than the
// token of every earlier term of the role, in any process (0 if the
// repository issues no tokens). Pass it with the leader's writes and let
// the storage refuse writes with a token lower than the last one it saw:
// a leader that stalled past its lease is then refused.
func (t *Term) Token() int64 { return t.token }

// Context returns a context that lives as long as the term: it is
// cancelled when the lease's Done channel closes (on a lost lease, or a
// fifth of the TTL before an unrenewed lease could expire), on [Term.Yield]
// and on [Candidate.Close], in each case before the lease is released.
// Its cause (context.Cause) is [ErrYielded], [ErrClosed], or an error
// wrapping [registry.ErrLockLost].
//
// [registry.ErrLockLost]: https://pkg.go.dev/github.com/lockreg/lockreg/registry#ErrLockLost
func (t *Term) Context() context.Context { return t.ctx }

// Yield ends the term if it has not ended: its context is cancelled with
// [ErrYielded], and the candidate releases the lease (after the callbacks
// have returned) and waits its busy-wait interval before it competes
// again, so that another candidate may lead. Yield returns at once, so it
// may be called from the callbacks.
func (t *Term) Yield() { t.cancel(ErrYielded) }

// live reports whether the term has not ended. It looks at the lease
// itself, so it is false from the moment the lease's Done channel closes.
func (t *Term) live() bool {
	select {
	case <-t.lease:
		return false
	case <-t.ctx.Done():
		return false
	default:
		return true
	}
}
