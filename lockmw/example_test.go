package lockmw_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/lockreg/lockreg/lockmw"
	"github.com/lockreg/lockreg/registry"
	"github.com/lockreg/lockreg/registry/registrytest"
)

// A router whose handler runs the messages of one entity one at a time, in
// the recommended order: Retry outside the lock, so that a lock timeout or
// a lost lease is retried with a lock taken anew. registry.NewLocal locks
// within this process; registry.New with a jdbc repository locks across
// instances.
func Example() {
	locks, err := registry.NewLocal()
	if err != nil {
		panic(err)
	}
	defer locks.Close(context.Background())
	perKey, err := lockmw.PerKey(locks, lockmw.KeyFromMetadata("entity_id"))
	if err != nil {
		panic(err)
	}

	logger := watermill.NopLogger{}
	pubSub := gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, logger)
	router, _ := message.NewRouter(message.RouterConfig{}, logger)
	router.AddMiddleware(
		middleware.Retry{MaxRetries: 3, InitialInterval: 100 * time.Millisecond, Multiplier: 2,
			ShouldRetry: func(p middleware.RetryParams) bool { return !errors.Is(p.Err, lockmw.ErrNoKey) }}.Middleware,
		perKey,
	)
	router.AddConsumerHandler("accounts", "account.events", pubSub, func(m *message.Message) error {
		token, ok := lockmw.Token(m.Context()) // guard the handler's writes with it
		fmt.Println(m.Metadata.Get("entity_id"), string(m.Payload), "under a lock:", ok && token > 0)
		return nil
	})
	go router.Run(context.Background())
	<-router.Running()

	for _, event := range []string{"opened", "credited"} {
		m := message.NewMessage(watermill.NewUUID(), []byte(event))
		m.Metadata.Set("entity_id", "account-42")
		pubSub.Publish("account.events", m) // returns once the handler acked it
	}
	router.Close()
	pubSub.Close()
	// Output:
	// account-42 opened under a lock: true
	// account-42 credited under a lock: true
}

// Three instances, each a registry of its own over one lock storage (a
// jdbc lock table in production), handle 30 messages of two keys with
// three goroutines each: never two handlers of a key at once.
func Example_instances() {
	storage := registrytest.NewMemory()
	var (
		mu      sync.Mutex
		running = map[string]int{}
		most    int
		wg      sync.WaitGroup
	)
	handler := func(m *message.Message) ([]*message.Message, error) {
		key := m.Metadata.Get("entity_id")
		mu.Lock()
		running[key]++
		most = max(most, running[key])
		mu.Unlock()
		time.Sleep(time.Millisecond)
		mu.Lock()
		running[key]--
		mu.Unlock()
		return nil, nil
	}
	msgs := make(chan *message.Message, 30)
	for i := range 30 {
		m := message.NewMessage(watermill.NewUUID(), nil)
		m.Metadata.Set("entity_id", fmt.Sprintf("entity-%d", i%2))
		msgs <- m
	}
	close(msgs)
	for range 3 {
		locks, err := registry.New(storage.NewClient(), registry.WithIdleBetweenTries(time.Millisecond))
		if err != nil {
			panic(err)
		}
		defer locks.Close(context.Background())
		perKey, err := lockmw.PerKey(locks, lockmw.KeyFromMetadata("entity_id"), lockmw.WithLockTimeout(time.Minute))
		if err != nil {
			panic(err)
		}
		h := perKey(handler)
		for range 3 {
			wg.Go(func() {
				for m := range msgs {
					if _, err := h(m); err != nil {
						panic(err)
					}
				}
			})
		}
	}
	wg.Wait()
	fmt.Println("most handlers of one key at once:", most)
	// Output: most handlers of one key at once: 1
}

// KeyFromPayload keys messages by a field of their payload.
func ExampleKeyFromPayload() {
	key := lockmw.KeyFromPayload(func(p []byte) (string, error) {
		var v struct {
			OrderID string `json:"order_id"`
		}
		if err := json.Unmarshal(p, &v); err != nil {
			return "", err
		}
		return v.OrderID, nil // "" when absent: the message has no key
	})
	k, err := key(message.NewMessage(watermill.NewUUID(), []byte(`{"order_id":"o-7","qty":2}`)))
	fmt.Println(k, err)
	// Output: o-7 <nil>
}
