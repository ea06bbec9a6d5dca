package scheduler

import (
	"context"
	"strconv"
	"time"

	"github.com/lockreg/lockreg/internal/backoff"
)

// listen runs the Listener on the table's channel until Stop, reconnecting
// with backoff. A notification's payload is the due time in epoch
// milliseconds ("0": now); each (re)connection wakes the fetch loop, since
// notifications sent while it was down are lost.
func (s *Scheduler) listen() {
	defer s.loops.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-s.live:
		case <-s.stopping:
		}
		cancel()
	}()
	retry := backoff.New(100*time.Millisecond, 30*time.Second)
	for ctx.Err() == nil {
		err := s.cfg.Listener.Listen(ctx, s.cfg.channel(), func() {
			retry.Reset()
			s.hint(time.Now())
		}, func(payload string) {
			ms, err := strconv.ParseInt(payload, 10, 64)
			if err != nil || ms == 0 {
				s.hint(time.Now())
				return
			}
			s.hint(time.UnixMilli(ms))
		})
		if ctx.Err() != nil {
			return
		}
		s.tel.log.Warn("scheduler: listener failed; polling meanwhile", "err", err)
		if !backoff.Sleep(ctx, retry.Next(), nil) {
			return
		}
	}
}
