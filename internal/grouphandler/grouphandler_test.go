package grouphandler

import (
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestNewPanicsOnAnIncompleteKind(t *testing.T) {
	complete := Kind{
		Name:             "test",
		DiscardReasonKey: "reason",
		Defaults:         Defaults{LockPrefix: "test:", LockTimeout: time.Second, PollInterval: time.Second, CorrelationIDKey: "cid"},
		Errors: Errors{NoCorrelationKey: errors.New("a"), NoMessageID: errors.New("b"),
			LockTimeout: errors.New("c"), LockLost: errors.New("d")},
	}
	New(complete, Settings{}) // must not panic
	for name, drop := range map[string]func(*Kind){
		"Name":                    func(k *Kind) { k.Name = "" },
		"DiscardReasonKey":        func(k *Kind) { k.DiscardReasonKey = "" },
		"Defaults":                func(k *Kind) { k.Defaults = Defaults{} },
		"Errors.NoCorrelationKey": func(k *Kind) { k.Errors.NoCorrelationKey = nil },
		"Errors.NoMessageID":      func(k *Kind) { k.Errors.NoMessageID = nil },
		"Errors.LockTimeout":      func(k *Kind) { k.Errors.LockTimeout = nil },
		"Errors.LockLost":         func(k *Kind) { k.Errors.LockLost = nil },
	} {
		k := complete
		drop(&k)
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("New without %s did not panic", name)
				}
			}()
			New(k, Settings{})
		}()
	}
}
