//go:build !linux

package main

import "time"

// holdFor keeps the contended key for d. Elsewhere than on Linux it is
// time.Sleep, which may end late by up to the runtime's timer resolution
// (see hold_linux.go).
func holdFor(d time.Duration) { time.Sleep(d) }
