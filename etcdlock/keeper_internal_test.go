package etcdlock

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A keep-alive that its stream's end fails (as when the keeper ends a
// stalled stream during a leader election: gRPC's Canceled) may pass on
// retry, so the registry retries the call instead of failing the lock.
func TestAKeepAliveWhoseStreamEndsFailsTransiently(t *testing.T) {
	k := &keeper{}
	ch := make(chan kaAnswer, 1)
	s := &kaStream{k: k, waiting: map[int64][]chan kaAnswer{7: {ch}}}
	k.fail(s, status.Error(codes.Canceled, "context canceled"))
	if a := <-ch; !isTransient(a.err) {
		t.Fatalf("the keep-alive's error %v is not transient", a.err)
	}
}
