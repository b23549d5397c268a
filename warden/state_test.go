package warden

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestOutputRing checks a process's output ring against a model (the bytes
// and streams it must hold from acked to read) through random reads of
// either stream, direct (tail, then commit) or copied in, and random acks,
// wrapping and growing the ring up to its window.
func TestOutputRing(t *testing.T) {
	for _, window := range []int64{4096, 10000, 1 << 16} {
		rng := rand.New(rand.NewPCG(uint64(window), 7))
		p := &proc{}
		var model, streams []byte // from offset p.acked
		next := byte(0)
		for step := range 20000 {
			switch rng.IntN(3) {
			case 0, 1: // a read of up to the room
				room := int(window - int64(p.read-p.acked))
				if room == 0 {
					continue
				}
				n := 1 + rng.IntN(min(room, 3000))
				stream := byte(1 + rng.IntN(2))
				buf := p.tail(n, window)
				if len(buf) == 0 || len(buf) > n {
					t.Fatalf("step %d: tail(%d) gave %d bytes", step, n, len(buf))
				}
				m := 1 + rng.IntN(len(buf))
				for i := range buf[:m] {
					buf[i] = next
					next++
				}
				p.commit(stream, m)
				model = append(model, buf[:m]...)
				streams = append(streams, bytes.Repeat([]byte{stream}, m)...)
			case 2: // an ack of some of it
				if p.read == p.acked {
					continue
				}
				k := rng.IntN(int(p.read-p.acked) + 1)
				p.ackTo(p.acked + uint64(k))
				model, streams = model[k:], streams[k:]
			}
			if int64(len(p.data)) > window {
				t.Fatalf("step %d: ring of %d bytes, window %d", step, len(p.data), window)
			}
			// Everything held reads back, run by run, as the model has it.
			var got, gotStreams []byte
			for off := p.acked; off < p.read; {
				s, d := p.peek(off, 1000)
				if len(d) == 0 {
					t.Fatalf("step %d: empty peek at %d", step, off)
				}
				got = append(got, d...)
				gotStreams = append(gotStreams, bytes.Repeat([]byte{s}, len(d))...)
				off += uint64(len(d))
			}
			if !bytes.Equal(got, model) || !bytes.Equal(gotStreams, streams) {
				t.Fatalf("step %d (window %d): the ring holds other bytes than were read", step, window)
			}
		}
	}
}

// TestOOMKills reads the count from the first of oomFiles that opens, from
// its kept fd, and sees the file's content change between reads.
func TestOOMKills(t *testing.T) {
	dir := t.TempDir()
	v1, v2 := filepath.Join(dir, "memory.oom_control"), filepath.Join(dir, "memory.events")
	saved := oomFiles
	t.Cleanup(func() {
		oomFiles = saved
		if oomFD.fd >= 0 {
			_ = unix.Close(oomFD.fd)
		}
		oomFD.fd = -1
	})
	for _, tc := range []struct {
		name   string
		files  map[string]string // written before the read
		want   int64
		keepFD bool // the fd of the previous step stays
	}{
		{"none readable", nil, -1, false},
		{"v2", map[string]string{v2: "low 0\nhigh 0\nmax 0\noom 2\noom_kill 2\noom_group_kill 0\n"}, 2, false},
		{"v2 again, changed", map[string]string{v2: "low 0\nhigh 0\nmax 0\noom 7\noom_kill 7\noom_group_kill 0\n"}, 7, true},
		{"no count", map[string]string{v1: "oom_kill_disable 0\nunder_oom 0\n"}, -1, false},
		{"v1", map[string]string{v1: "oom_kill_disable 0\nunder_oom 0\noom_kill 5\n"}, 5, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !tc.keepFD {
				_ = os.Remove(v1)
				_ = os.Remove(v2)
				if oomFD.fd >= 0 {
					_ = unix.Close(oomFD.fd)
				}
				oomFD.fd = -1
			}
			oomFiles = []string{v1, v2}
			for name, content := range tc.files {
				if err := os.WriteFile(name, []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if got := oomKills(); got != tc.want {
				t.Fatalf("oomKills() = %d, want %d", got, tc.want)
			}
		})
	}
}
