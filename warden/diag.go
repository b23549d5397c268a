package warden

import (
	"fmt"
	"os"
	"sync"
	"time"
)

// Diagnostics go to stderr, which under Docker is a pipe that nobody may be
// reading (and, once the runtime detached, one whose bytes Docker discards).
// So they are bounded twice: a token bucket limits the rate (a burst, then
// one line every few seconds), and a small queue drained by one goroutine
// means a blocked stderr never blocks the warden (lines are dropped and
// counted instead).
const (
	diagBurst    = 64
	diagEvery    = 5 * time.Second
	diagLineMax  = 300
	diagQueueCap = 32
)

var diagnostics = struct {
	mu      sync.Mutex
	tokens  float64
	last    time.Time
	dropped int
	queue   chan string
	once    sync.Once
}{tokens: diagBurst}

// logf writes one bounded diagnostic line to stderr without ever blocking.
func logf(format string, args ...any) {
	d := &diagnostics
	d.once.Do(func() {
		d.queue = make(chan string, diagQueueCap)
		go func() {
			for line := range d.queue {
				// stderr is where failures are told: one of its own
				// has nowhere to go.
				_, _ = os.Stderr.WriteString(line)
			}
		}()
	})
	line := fmt.Sprintf(format, args...)
	if len(line) > diagLineMax {
		line = line[:diagLineMax] + "…"
	}
	d.mu.Lock()
	now := time.Now()
	if !d.last.IsZero() {
		d.tokens += float64(now.Sub(d.last)) / float64(diagEvery)
		if d.tokens > diagBurst {
			d.tokens = diagBurst
		}
	}
	d.last = now
	if d.tokens < 1 {
		d.dropped++
		d.mu.Unlock()
		return
	}
	d.tokens--
	if d.dropped > 0 {
		line = fmt.Sprintf("(%d lines suppressed) %s", d.dropped, line)
		d.dropped = 0
	}
	d.mu.Unlock()
	select {
	case d.queue <- "stockade-warden: " + line + "\n":
	default:
		d.mu.Lock()
		d.dropped++
		d.mu.Unlock()
	}
}
