package framing

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/docker/docker/pkg/stdcopy"
)

// benchSize is the input each class decodes per op: at least 64 MiB of
// frames (DESIGN/issue 2), generated once per class, deterministically.
const benchSize = 64 << 20

// benchClasses are the frame-size classes: payloads uniform in [min, max].
// About three frames in four are stdout, the rest stderr (see genFrames).
var benchClasses = []struct {
	name     string
	min, max int
}{
	{"small", 1, 64},       // line-by-line output, the common case
	{"medium", 1, 4 << 10}, // bursts
	{"large", 1, 32 << 10}, // up to the daemon's largest frame
}

// socket hides bytes.Reader's WriteTo (and everything else but Read), as a
// net.Conn would.
type socket struct{ r *bytes.Reader }

func (s socket) Read(p []byte) (int, error) { return s.r.Read(p) }

// counter is a destination that keeps nothing.
type counter struct{ n int64 }

func (c *counter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }

// BenchmarkCopy compares Copy with moby's stdcopy.StdCopy on the same input
// in the same run. One op is one pass over the whole input.
func BenchmarkCopy(b *testing.B) {
	impls := []struct {
		name string
		copy func(stdout, stderr io.Writer, src io.Reader) (int64, error)
	}{
		{"stockade", Copy},
		{"stdcopy", stdcopy.StdCopy},
	}
	for _, c := range benchClasses {
		b.Run(c.name, func(b *testing.B) {
			in, frames, payload := genFrames(rand.New(rand.NewPCG(42, uint64(c.max))), benchSize, c.min, c.max)
			for _, impl := range impls {
				b.Run(impl.name, func(b *testing.B) {
					r := bytes.NewReader(in)
					var out, errs counter
					b.SetBytes(int64(len(in)))
					b.ReportAllocs()
					// One warm-up pass (outside the count), so a pooled
					// buffer is not counted against the frames.
					if _, err := impl.copy(&out, &errs, socket{r}); err != nil {
						b.Fatal(err)
					}
					var ms0, ms1 runtime.MemStats
					runtime.ReadMemStats(&ms0)
					b.ResetTimer()
					for range b.N {
						r.Reset(in)
						out.n, errs.n = 0, 0
						n, err := impl.copy(&out, &errs, socket{r})
						if err != nil || n != int64(payload) || out.n+errs.n != n {
							b.Fatalf("copy = %d, %v; want %d", n, err, payload)
						}
					}
					b.StopTimer()
					runtime.ReadMemStats(&ms1)
					b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/float64(b.N)/float64(frames), "allocs/frame")
					b.ReportMetric(float64(frames), "frames/op")
				})
			}
		})
	}
}

// BenchmarkDecoderNext measures the pull API alone: one Next per piece.
func BenchmarkDecoderNext(b *testing.B) {
	for _, c := range benchClasses {
		b.Run(c.name, func(b *testing.B) {
			in, frames, payload := genFrames(rand.New(rand.NewPCG(43, uint64(c.max))), 8<<20, c.min, c.max)
			r := bytes.NewReader(in)
			d := NewDecoder(nil, Options{})
			b.SetBytes(int64(len(in)))
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				r.Reset(in)
				d.Reset(socket{r})
				got := 0
				for {
					_, p, err := d.Next()
					if err != nil {
						if !errors.Is(err, io.EOF) {
							b.Fatal(err)
						}
						break
					}
					got += len(p)
				}
				if got != payload {
					b.Fatalf("decoded %d of %d bytes", got, payload)
				}
			}
			b.ReportMetric(float64(frames), "frames/op")
		})
	}
}
