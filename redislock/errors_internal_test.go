package redislock

import (
	"errors"
	"fmt"
	"testing"
)

// replyError is a server reply as go-redis returns one that it has no
// type of its own for.
type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}

// The replies that say "not now" are transient, by their code; the other
// classes are checked against real servers in errors_test.go.
func TestReplyCodesThatMayPassAreTransient(t *testing.T) {
	for _, msg := range []string{
		"LOADING Redis is loading the dataset in memory",
		"TRYAGAIN Multiple keys request during rehashing of slot",
		"MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
		"NOREPLICAS Not enough good replicas to write.",
		"OOM command not allowed when used memory > 'maxmemory'.",
		"ERR max number of clients reached",
	} {
		if err := fmt.Errorf("wrapped: %w", replyError(msg)); !isTransient(err) {
			t.Errorf("%q is not transient", msg)
		}
	}
	for _, msg := range []string{
		"WRONGTYPE Operation against a key holding the wrong kind of value",
		"NOPERM User has no permissions to run the 'evalsha' command",
		"ERR unknown command 'EVALSHA'",
	} {
		if isTransient(replyError(msg)) {
			t.Errorf("%q is transient", msg)
		}
	}
	if isTransient(errors.New("LOADING but not a reply")) {
		t.Error("an error that is no reply of the server is classified by its text")
	}
}
