package warden

import (
	"io"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// InProcess configures a warden run in this process (NewInProcess).
type InProcess struct {
	// Start is asked for each spawn, its stdio ready: the Program its
	// child runs, or why it cannot start (a *StartError for its exit
	// code; an error that is fs.ErrNotExist is 127, any other 126).
	Start func(c *Child) (Program, error)
	// OOMKills is the sandbox's OOM kill count as the warden reports it
	// (nil: 0).
	OOMKills func() int64
	// PID and Socket are what Hello reports as the warden's pid and its
	// reattach socket.
	PID    int
	Socket string
	// BufferCap caps the unacknowledged output of all processes together
	// (0: the program's default).
	BufferCap int64
	// Env and Dir are the warden's own environment and directory, which a
	// spawn's are merged with and default to.
	Env []string
	Dir string
}

// Server is a warden run in this process: its links are connections it is
// handed, its children Programs.
type Server struct {
	s  *state
	ip *inProcess
}

// NewInProcess makes a warden that serves links handed to it: Serve for
// the first (which must open with Init), Reattach for each later one.
func NewInProcess(cfg InProcess) *Server {
	bufferCap := cfg.BufferCap
	if bufferCap <= 0 {
		bufferCap = defaultBufferCap
	}
	ip := &inProcess{start: cfg.Start, oom: cfg.OOMKills, signals: make(map[int]chan syscall.Signal)}
	s := newState(bufferCap, ip, cfg.PID)
	ip.s = s
	s.socket = cfg.Socket
	s.env = append([]string(nil), cfg.Env...)
	if cfg.Dir != "" {
		s.cwd = cfg.Dir
	}
	return &Server{s: s, ip: ip}
}

// Serve serves the first link on conn until it ends (conn is closed then);
// an error says why the link had no Init (nothing can use this warden).
func (v *Server) Serve(conn io.ReadWriteCloser) error {
	return v.s.first(conn, conn, func() { _ = conn.Close() }) // the link's end: nothing to lose
}

// Reattach runs the reattach handshake on conn and, if it passes, serves
// the link until it ends; conn is closed either way.
func (v *Server) Reattach(conn net.Conn) {
	if l := v.s.handshake(conn); l != nil {
		l.serve()
	}
}

// Stop ends the warden as its container's end would: the current link is
// closed, no link is taken any more, and every child is killed.
func (v *Server) Stop() {
	v.Retire()
	v.ip.killAll(unix.SIGKILL)
}

// Retire ends the warden alone, as `stockade-warden retire` kills its
// server: its link closes and no link is taken any more; its children run
// on.
func (v *Server) Retire() {
	s := v.s
	s.mu.Lock()
	s.stopped = true
	if l := s.link; l != nil {
		s.endLocked(l)
	}
	s.mu.Unlock()
}

// Signal signals a child's group, as `stockade-warden kill` does when the
// runtime's link to the warden is lost; false when no child of that group
// runs.
func (v *Server) Signal(pgid int, sig syscall.Signal) bool {
	return v.ip.kill(pgid, sig) == nil
}

// Processes is how many processes the warden holds (spawned and not yet
// forgotten).
func (v *Server) Processes() int {
	v.s.mu.Lock()
	defer v.s.mu.Unlock()
	return len(v.s.procs)
}
