package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"testing"
	"time"
)

// relaySize is what BenchmarkRelay moves per connection.
const relaySize = 64 << 20

// sourceServer sends relaySize bytes to each connection and closes it.
func sourceServer(b *testing.B) uint16 {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = l.Close() })
	chunk := make([]byte, 1<<20)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer func() { _ = c.Close() }()
				for range relaySize / len(chunk) {
					if _, err := c.Write(chunk); err != nil {
						return
					}
				}
			}()
		}
	}()
	return port(b, l.Addr())
}

// openVia returns a connection to target: direct, or through the proxy
// with CONNECT (then the reader carries the tunnel).
func openVia(b *testing.B, h *harness, target string) (net.Conn, io.Reader) {
	if h == nil {
		c, err := net.Dial("tcp", target)
		if err != nil {
			b.Fatal(err)
		}
		return c, c
	}
	c, err := net.Dial("tcp", h.addr)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target); err != nil {
		b.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil || resp.StatusCode != 200 {
		b.Fatalf("CONNECT: %v %v", resp, err)
	}
	return c, br
}

// BenchmarkRelay: 64 MiB from a local server, through CONNECT and direct
// in the same run (the target: proxied ≥ 0.9× direct).
func BenchmarkRelay(b *testing.B) {
	for _, via := range []string{"direct", "proxied"} {
		b.Run(via, func(b *testing.B) {
			src := hostPort(sourceServer(b))
			var h *harness
			if via == "proxied" {
				h = startProxy(b, 16, src)
			}
			buf := make([]byte, 1<<20)
			b.SetBytes(relaySize)
			b.ResetTimer()
			for range b.N {
				c, r := openVia(b, h, src)
				var n int64
				for {
					k, err := r.Read(buf)
					n += int64(k)
					if err != nil {
						break
					}
				}
				_ = c.Close()
				if n != relaySize {
					b.Fatalf("read %d bytes, want %d", n, relaySize)
				}
			}
		})
	}
}

// BenchmarkConnectLatency: a connection and one small request/response,
// through CONNECT and direct (the target: p50 added ≤ 1 ms). It
// reports the median as p50-µs beside the mean ns/op.
func BenchmarkConnectLatency(b *testing.B) {
	for _, via := range []string{"direct", "proxied"} {
		b.Run(via, func(b *testing.B) {
			echo := hostPort(echoServer(b))
			var h *harness
			if via == "proxied" {
				h = startProxy(b, 16, echo)
			}
			ping := []byte("ping")
			got := make([]byte, len(ping))
			times := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for range b.N {
				start := time.Now()
				c, r := openVia(b, h, echo)
				if _, err := c.Write(ping); err != nil {
					b.Error(err)
				}
				if _, err := io.ReadFull(r, got); err != nil {
					b.Fatal(err)
				}
				times = append(times, time.Since(start))
				_ = c.Close()
			}
			slices.Sort(times)
			b.ReportMetric(float64(times[len(times)/2].Microseconds()), "p50-µs")
		})
	}
}
