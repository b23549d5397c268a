package wire

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// SecretSize is the size of a warden's secret and of a challenge nonce.
const SecretSize = 32

// MaxProcesses bounds the processes one warden holds (and a Table lists).
const MaxProcesses = 4096

// Init is the runtime's first message on a warden's first link.
type Init struct {
	// Secret (hex) authenticates every later reattach.
	Secret string `json:"secret"`
	// Window and StdinWindow are the per-process windows; zero takes the
	// defaults.
	Window      int `json:"window,omitempty"`
	StdinWindow int `json:"stdin_window,omitempty"`
}

func (m *Init) Validate() error {
	if _, err := DecodeHex(m.Secret, SecretSize); err != nil {
		return fmt.Errorf("secret: %w", err)
	}
	if m.Window < 0 || m.Window > 64<<20 || m.StdinWindow < 0 || m.StdinWindow > 16<<20 {
		return fmt.Errorf("windows %d/%d out of range", m.Window, m.StdinWindow)
	}
	return nil
}

// Rekey replaces the secret of a live, authenticated link's warden: every
// later reattach must answer with the MAC under Secret (a handshake in
// progress under the old secret is refused too). It travels only after the
// handshake, on a link that already proved the old secret.
type Rekey struct {
	// Secret (hex, SecretSize bytes) is the new secret.
	Secret string `json:"secret"`
}

func (m *Rekey) Validate() error {
	if _, err := DecodeHex(m.Secret, SecretSize); err != nil {
		return fmt.Errorf("secret: %w", err)
	}
	return nil
}

// Challenge is the warden's first message on a reattach link.
type Challenge struct {
	Nonce string `json:"nonce"` // hex, SecretSize bytes
}

func (m *Challenge) Validate() error {
	_, err := DecodeHex(m.Nonce, SecretSize)
	return err
}

// Auth answers a Challenge: MAC(secret, nonce), hex. Nonce is the
// runtime's own challenge, which the warden answers in Hello.Proof: a
// reattach authenticates both ends, so a listener that is not the warden
// cannot pass for one. A relay to the live warden would pass both
// answers on (there is no channel binding, and frames after the handshake
// carry no MAC): what stops a relay is the bridge's check of the
// listener's pid (cmd/warden/attach.go).
type Auth struct {
	MAC   string `json:"mac"`
	Nonce string `json:"nonce"`
}

func (m *Auth) Validate() error {
	if _, err := DecodeHex(m.MAC, sha256.Size); err != nil {
		return fmt.Errorf("mac: %w", err)
	}
	if _, err := DecodeHex(m.Nonce, SecretSize); err != nil {
		return fmt.Errorf("nonce: %w", err)
	}
	return nil
}

// MAC is the answer to a challenge: HMAC-SHA256 of the nonce under the
// secret.
func MAC(secret, nonce []byte) []byte {
	h := hmac.New(sha256.New, secret)
	h.Write(nonce)
	return h.Sum(nil)
}

// Proof is the warden's answer to the runtime's nonce: HMAC-SHA256 under
// the secret of the nonce behind a label, so that neither end's answer
// can be replayed as the other's.
func Proof(secret, nonce []byte) []byte {
	return MAC(secret, append([]byte("stockade-warden proof\x00"), nonce...))
}

// Hello says the link is up.
type Hello struct {
	Version     string `json:"version"`
	PID         int    `json:"pid"`
	Window      int    `json:"window"`
	StdinWindow int    `json:"stdin_window"`
	// Socket is where the warden accepts reattaches.
	Socket string `json:"socket"`
	// Proof (hex), on a reattach only: Proof(secret, Auth.Nonce).
	Proof string `json:"proof,omitempty"`
}

func (m *Hello) Validate() error {
	if m.Version == "" || len(m.Version) > 128 {
		return errors.New("no version")
	}
	if m.PID <= 0 || m.Window <= 0 || m.Window > 64<<20 || m.StdinWindow <= 0 || m.StdinWindow > 16<<20 {
		return fmt.Errorf("pid %d, windows %d/%d out of range", m.PID, m.Window, m.StdinWindow)
	}
	if len(m.Socket) > 108 {
		return errors.New("socket path too long")
	}
	if m.Proof != "" {
		if _, err := DecodeHex(m.Proof, sha256.Size); err != nil {
			return fmt.Errorf("proof: %w", err)
		}
	}
	return nil
}

// Spawn asks the warden to start a process on the frame's channel.
type Spawn struct {
	// ID is the runtime's process id.
	ID   string   `json:"id"`
	Argv []string `json:"argv"`
	// Env is added to the warden's own environment (later entries win).
	Env   []string `json:"env,omitempty"`
	Dir   string   `json:"dir,omitempty"`
	Stdin bool     `json:"stdin,omitempty"`
	TTY   bool     `json:"tty,omitempty"`
	Rows  uint16   `json:"rows,omitempty"`
	Cols  uint16   `json:"cols,omitempty"`
	// NoChanges runs the process untracked: its Changes says so, and its
	// syscalls pay nothing for the tracking.
	NoChanges bool `json:"no_changes,omitempty"`
	// Sent, if set, is called by Link.Spawn once the request is written
	// (the runtime's crash drills stop there). Not sent.
	Sent func() `json:"-"`
}

func (m *Spawn) Validate() error {
	if err := CheckID(m.ID); err != nil {
		return err
	}
	if len(m.Argv) == 0 || len(m.Argv) > MaxArgs || len(m.Env) > MaxArgs {
		return fmt.Errorf("%d arguments, %d environment entries", len(m.Argv), len(m.Env))
	}
	if m.Argv[0] == "" {
		return errors.New("empty program name")
	}
	for _, s := range append(append([]string(nil), m.Argv...), m.Env...) {
		if strings.IndexByte(s, 0) >= 0 {
			return errors.New("a NUL byte in an argument or environment entry")
		}
	}
	for _, e := range m.Env {
		if k, _, ok := strings.Cut(e, "="); !ok || k == "" {
			return fmt.Errorf("environment entry %q is not NAME=value", e)
		}
	}
	if m.Dir != "" && !strings.HasPrefix(m.Dir, "/") {
		return fmt.Errorf("working directory %q is not absolute", m.Dir)
	}
	return nil
}

// Started reports a spawned process.
type Started struct {
	PID  int `json:"pid"`
	PGID int `json:"pgid"`
	// OOMKills is the sandbox memory cgroup's OOM kill count at the
	// spawn (-1 when unreadable).
	OOMKills int64 `json:"oom_kills"`
}

func (m *Started) Validate() error {
	if m.PID <= 0 || m.PGID <= 0 {
		return fmt.Errorf("pid %d, pgid %d", m.PID, m.PGID)
	}
	return nil
}

// SpawnFailed reports a process that could not start.
type SpawnFailed struct {
	// Code is 127 (not found) or 126 (found, not executable), as a shell.
	Code  int    `json:"code"`
	Error string `json:"error"`
}

func (m *SpawnFailed) Validate() error {
	if m.Code != 126 && m.Code != 127 {
		return fmt.Errorf("code %d", m.Code)
	}
	if len(m.Error) > 4096 {
		return errors.New("error text too long")
	}
	return nil
}

// Reaped reports a reaped child: its exit status.
type Reaped struct {
	// Code is the exit status, or -1 when Signal ended it.
	Code     int   `json:"code"`
	Signal   int   `json:"signal,omitempty"`
	OOMKills int64 `json:"oom_kills"`
}

func (m *Reaped) Validate() error {
	return checkStatus(m.Code, m.Signal)
}

func checkStatus(code, signal int) error {
	if signal == 0 && (code < 0 || code > 255) || signal != 0 && (code != -1 || signal < 0 || signal > 64) {
		return fmt.Errorf("code %d, signal %d", code, signal)
	}
	return nil
}

// Exited reports a reaped process whose pipes reached their end.
type Exited struct {
	// Code is the exit status, or -1 when Signal ended it.
	Code   int `json:"code"`
	Signal int `json:"signal,omitempty"`
	// Output is the total of the output sequence: the runtime has it all
	// once it has read up to this offset.
	Output uint64 `json:"output"`
	// Stdout and Stderr split Output by stream.
	Stdout   uint64 `json:"stdout"`
	Stderr   uint64 `json:"stderr"`
	OOMKills int64  `json:"oom_kills"`
	// Usage is what the process used (zero, absent: a warden that could
	// not tell). A value, not a pointer: an Exited compares with == (a
	// reattach's table exit resent is the same exit).
	Usage Usage `json:"usage,omitzero"`
}

// Usage is what a process used, as wait4's rusage reports it: the process
// and the descendants it waited for (an orphan the warden reaped is
// nobody's). Wall is from the spawn to the reap, on the warden's monotonic
// clock.
type Usage struct {
	WallNanos   int64 `json:"wall_ns"`
	UserNanos   int64 `json:"user_ns"`
	SystemNanos int64 `json:"sys_ns"`
	// MaxRSS is the largest resident set, in bytes.
	MaxRSS int64 `json:"max_rss"`
	// ReadBytes and WriteBytes are block I/O (ru_inblock, ru_oublock, in
	// 512-byte blocks): what reached or came from a device, not what
	// the page cache absorbed.
	ReadBytes  int64 `json:"read_bytes"`
	WriteBytes int64 `json:"write_bytes"`
}

// MaxUsage bounds each figure of a Usage (2^53: 104 days of CPU time, 8
// PiB): the warden runs as the sandbox's user and may lie, and a sum of
// figures this size cannot overflow.
const MaxUsage = 1 << 53

// Validate refuses a figure that is negative or past MaxUsage.
func (u Usage) Validate() error {
	for _, v := range []int64{u.WallNanos, u.UserNanos, u.SystemNanos, u.MaxRSS, u.ReadBytes, u.WriteBytes} {
		if v < 0 || v > MaxUsage {
			return fmt.Errorf("usage with a figure out of range: %+v", u)
		}
	}
	return nil
}

func (m *Exited) Validate() error {
	if err := checkStatus(m.Code, m.Signal); err != nil {
		return err
	}
	if err := m.Usage.Validate(); err != nil {
		return err
	}
	if m.Stdout+m.Stderr != m.Output || m.Stdout > m.Output {
		return fmt.Errorf("stdout %d and stderr %d do not add up to output %d", m.Stdout, m.Stderr, m.Output)
	}
	return nil
}

// Entry is one process in a warden's table.
type Entry struct {
	Channel uint32 `json:"channel"`
	ID      string `json:"id"`
	PID     int    `json:"pid"`
	PGID    int    `json:"pgid"`
	Running bool   `json:"running"`
	// Exit is set once the process was reaped and its pipes ended.
	Exit *Exited `json:"exit,omitempty"`
	// Acked is the last acknowledged output offset; the warden holds every
	// byte from there.
	Acked uint64 `json:"acked"`
	// Output is how much output the warden has read so far.
	Output uint64 `json:"output"`
}

// Table is the warden's process table.
type Table struct {
	Processes []Entry `json:"processes"`
}

func (m *Table) Validate() error {
	if len(m.Processes) > MaxProcesses {
		return fmt.Errorf("%d processes", len(m.Processes))
	}
	seen := make(map[uint32]bool, len(m.Processes))
	ids := make(map[string]bool, len(m.Processes))
	for _, e := range m.Processes {
		if e.Channel == 0 || seen[e.Channel] {
			return fmt.Errorf("channel %d listed twice or zero", e.Channel)
		}
		if ids[e.ID] {
			return fmt.Errorf("process %s listed twice", e.ID)
		}
		seen[e.Channel], ids[e.ID] = true, true
		if err := CheckID(e.ID); err != nil {
			return err
		}
		if e.PID <= 0 || e.PGID <= 0 || e.Acked > e.Output {
			return fmt.Errorf("process %s: pid %d, pgid %d, acked %d of %d", e.ID, e.PID, e.PGID, e.Acked, e.Output)
		}
		if e.Exit != nil {
			if e.Running {
				return fmt.Errorf("process %s: running with an exit", e.ID)
			}
			if err := e.Exit.Validate(); err != nil {
				return fmt.Errorf("process %s: %w", e.ID, err)
			}
		}
	}
	return nil
}

// CheckID refuses a process id that is empty, over 128 bytes or not printable ASCII.
func CheckID(id string) error {
	if id == "" || len(id) > 128 {
		return fmt.Errorf("process id of %d bytes", len(id))
	}
	for _, c := range []byte(id) {
		if c <= ' ' || c > '~' {
			return fmt.Errorf("process id %q has a byte outside printable ASCII", id)
		}
	}
	return nil
}

// DecodeHex decodes a hex-encoded secret, nonce or MAC of n bytes.
func DecodeHex(s string, n int) ([]byte, error) {
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != n {
		return nil, fmt.Errorf("not %d hex-encoded bytes", n)
	}
	return b, nil
}
