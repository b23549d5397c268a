package link

import "sync"

// queueMin is a queue's first buffer: rings of this size are pooled.
const queueMin = 64 << 10

var ringPool = sync.Pool{New: func() any { b := make([]byte, queueMin); return &b }}

// seg is a run of one stream's bytes in an outQueue.
type seg struct {
	stream byte
	n      int32
}

// outQueue is one process's received, unconsumed output: a byte ring
// (grown by doubling up to the window, which bounds it) and a ring of
// segments, consecutive bytes of one stream merged. Steady streaming
// allocates nothing. Memory is at most the window plus 8 bytes per queued
// segment: 9 times the window if a warden sends 1-byte frames alternating
// the streams.
type outQueue struct {
	buf     []byte
	pooled  *[]byte // buf's pool handle, if it came from ringPool
	head, n int
	segs    []seg
	sh, sn  int
}

// push appends data (limit bounds the ring; the window guarantees the bytes
// queued fit).
func (q *outQueue) push(stream byte, data []byte, limit int) {
	if len(data) == 0 {
		return
	}
	if need := q.n + len(data); need > len(q.buf) {
		q.grow(need, limit)
	}
	tail := q.head + q.n
	if tail >= len(q.buf) {
		tail -= len(q.buf)
	}
	k := copy(q.buf[tail:], data)
	copy(q.buf, data[k:])
	q.n += len(data)

	if q.sn > 0 {
		last := &q.segs[(q.sh+q.sn-1)%len(q.segs)]
		if last.stream == stream {
			last.n += int32(len(data))
			return
		}
	}
	if q.sn == len(q.segs) {
		segs := make([]seg, max(2*len(q.segs), 16))
		for i := range q.sn {
			segs[i] = q.segs[(q.sh+i)%len(q.segs)]
		}
		q.segs, q.sh = segs, 0
	}
	q.segs[(q.sh+q.sn)%len(q.segs)] = seg{stream, int32(len(data))}
	q.sn++
}

func (q *outQueue) grow(need, limit int) {
	size := max(2*len(q.buf), queueMin)
	for size < need {
		size *= 2
	}
	if size > limit {
		size = max(limit, need)
	}
	var buf []byte
	var pooled *[]byte
	if size == queueMin {
		pooled = ringPool.Get().(*[]byte)
		buf = *pooled
	} else {
		buf = make([]byte, size)
	}
	if q.n > 0 {
		k := copy(buf, q.buf[q.head:min(q.head+q.n, len(q.buf))])
		copy(buf[k:], q.buf[:q.n-k])
	}
	// The old buffer may hold the data Next returned last: it is left to
	// the garbage collector, never pooled.
	q.buf, q.pooled, q.head = buf, pooled, 0
}

// peek returns the first run of bytes of one stream, at most limit bytes,
// contiguous in the ring (q.n > 0).
func (q *outQueue) peek(limit int) (byte, []byte) {
	s := q.segs[q.sh]
	n := min(int(s.n), len(q.buf)-q.head, limit)
	return s.stream, q.buf[q.head : q.head+n]
}

// pop drops n bytes that peek returned.
func (q *outQueue) pop(n int) {
	q.head += n
	if q.head >= len(q.buf) {
		q.head -= len(q.buf)
	}
	q.n -= n
	s := &q.segs[q.sh]
	s.n -= int32(n)
	if s.n == 0 {
		q.sh = (q.sh + 1) % len(q.segs)
		q.sn--
	}
	if q.n == 0 {
		q.head = 0
	}
}

// release empties the queue and returns its buffer to the pool: nothing
// may use the data peek returned any more.
func (q *outQueue) release() {
	if q.pooled != nil {
		ringPool.Put(q.pooled)
	}
	*q = outQueue{}
}

// drop empties the queue without pooling its buffer (the data peek
// returned may still be in use).
func (q *outQueue) drop() { *q = outQueue{} }
