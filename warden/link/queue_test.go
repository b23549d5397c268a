package link

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// TestQueueModel runs random pushes and reads through an outQueue and
// checks them against a plain slice of (stream, byte) pairs.
func TestQueueModel(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 2))
		limit := []int{100, 4096, queueMin, 3 * queueMin}[seed%4]
		var q outQueue
		var model []byte   // data
		var streams []byte // one stream per byte
		held := 0
		var heldData []byte
		for range 5000 {
			if rng.IntN(2) == 0 {
				// Push while within the limit.
				room := limit - len(model)
				if room == 0 {
					continue
				}
				n := 1 + rng.IntN(min(room, 2000))
				d := make([]byte, n)
				for i := range d {
					d[i] = byte(rng.Uint32())
				}
				s := byte(1 + rng.IntN(2))
				q.push(s, d, limit)
				model = append(model, d...)
				streams = append(streams, bytes.Repeat([]byte{s}, n)...)
				continue
			}
			// Release what was held, then peek.
			if held > 0 {
				q.pop(held)
				model, streams = model[held:], streams[held:]
				held = 0
			}
			if q.n != len(model) {
				t.Fatalf("seed %d: queue of %d, model %d", seed, q.n, len(model))
			}
			if q.n == 0 {
				continue
			}
			s, d := q.peek(1 + rng.IntN(3000))
			if len(d) == 0 || !bytes.Equal(d, model[:len(d)]) || !bytes.Equal(streams[:len(d)], bytes.Repeat([]byte{s}, len(d))) {
				t.Fatalf("seed %d: peek differs from the model", seed)
			}
			held, heldData = len(d), bytes.Clone(d)
			// The held data survives pushes (a grow leaves it alone).
			if room := limit - len(model); room > 0 {
				d2 := bytes.Repeat([]byte{0xee}, min(room, 1+rng.IntN(500)))
				q.push(1, d2, limit)
				model = append(model, d2...)
				streams = append(streams, bytes.Repeat([]byte{1}, len(d2))...)
			}
			if !bytes.Equal(d, heldData) {
				t.Fatalf("seed %d: held data overwritten", seed)
			}
			if len(q.buf) > max(limit, 0) {
				t.Fatalf("seed %d: buffer of %d beyond the limit %d", seed, len(q.buf), limit)
			}
		}
		q.release()
	}
}
