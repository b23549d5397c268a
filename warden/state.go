package warden

import (
	"os"
	"sort"
	"sync"
	"time"

	"github.com/stockade/stockade/warden/wire"
)

// runCost is what one stream run (a change between stdout and stderr in a
// process's output) is charged against the total buffer cap: a child that
// alternates one byte to each stream must not make the bookkeeping, rather
// than the bytes, the unbounded part.
const runCost = 16

// defaultBufferCap caps the unacknowledged output of all processes together
// (the per-process window alone would let many processes add up).
const defaultBufferCap = 64 << 20

// maxSpawns bounds the spawns under way at once. A spawn waits mostly on
// the kernel (path lookups, the child's execve while its vfork parent
// sleeps): two side by side overlap those waits; more gained nothing
// measurable on two CPUs (BenchmarkSpawnBurst100), and each fork holds one
// of the warden's two Ps until its child's execve.
const maxSpawns = 2

// state is the warden: its processes, the current link, the windows. One
// mutex guards everything (the warden is small and its critical sections
// are short); conditions on it wake readers, stdin feeders and link writers.
type state struct {
	mu sync.Mutex
	// space wakes output readers blocked on the total cap.
	space *sync.Cond

	secret      []byte // nil until Init: no reattach before
	window      int64
	stdinWindow int64
	capTotal    int64
	total       int64 // unacked output + run costs

	procs map[uint32]*proc
	byPID map[int]*proc // until reaped

	link   *link // nil while no link is up
	socket string
	// pid is the warden's pid as Hello reports it; sys its process
	// boundary.
	pid int
	sys procs
	// stopped: the warden is gone (an in-process one whose container
	// ended): no link is taken any more.
	stopped bool

	// forkMu is held for reading around each spawn (check, fork,
	// register; spawns run side by side) and for writing around every
	// wait4 pass, so the reaper never reaps a pid that is not yet in
	// byPID (and never steals the wait of a failed exec from the syscall
	// package), and around a table, so a table lists every spawn begun
	// before it.
	forkMu sync.RWMutex
	// spawning holds the channels whose spawn is under way (guarded by
	// mu); spawnSlots bounds how many run at once.
	spawning   map[uint32]struct{}
	spawnSlots chan struct{}
	// devNull is the stdin of every child spawned without one (opened
	// once: a spawn is a burst of syscalls, and this one need not be).
	devNull *os.File
	env     []string
	cwd     string
}

func newState(capTotal int64, pr procs, pid int) *state {
	s := &state{
		sys:         pr,
		pid:         pid,
		window:      wire.DefaultWindow,
		stdinWindow: wire.DefaultStdinWindow,
		capTotal:    capTotal,
		procs:       make(map[uint32]*proc),
		byPID:       make(map[int]*proc),
		spawning:    make(map[uint32]struct{}),
		spawnSlots:  make(chan struct{}, maxSpawns),
		env:         os.Environ(),
	}
	s.space = sync.NewCond(&s.mu)
	if f, err := os.Open(os.DevNull); err == nil {
		s.devNull = f
	}
	if wd, err := os.Getwd(); err == nil {
		s.cwd = wd
	} else {
		s.cwd = "/"
	}
	return s
}

// outRun is a stretch of one stream in a process's output sequence, ending
// (exclusive) at absolute offset end.
type outRun struct {
	end    uint64
	stream byte
}

// proc is one spawned process, from Spawn until Forget.
type proc struct {
	ch  uint32
	id  string
	pid int
	tty bool

	// Output: a ring, data[head] the byte at offset acked, holding
	// offsets [acked, read); runs say which stream each byte came from.
	data  []byte
	head  int
	runs  []outRun
	acked uint64
	read  uint64
	// readErr is how much of read came from stderr.
	readErr uint64
	open    int // output streams not yet at their end
	// fullReads says, per stream, that its last read filled the buffer
	// (the child streams): the next one goes straight into data.
	fullReads [2]bool
	outs      []*os.File
	master    *os.File // the pty master (TTY only)
	window    *sync.Cond

	// Link-scoped: reset when a new link takes over.
	sent     uint64 // next offset to send
	sending  bool   // first link, spawned on this link, or Resumed
	exitSent bool
	reapSent bool
	// changesSent: Changes went out right before the Exited to come;
	// changesFirst: a Resume of an exited process, Changes is sent
	// before anything else (and again right before Exited).
	changesSent  bool
	changesFirst bool
	queued       bool // in the link's ready list

	// Stdin.
	stdin     *os.File // pipe or pty master; nil without stdin
	in        []byte   // received, not yet taken by the feeder
	inRecv    uint64
	inWritten uint64
	inAckSent uint64
	inBase    uint64 // inRecv when the current link took over
	inAckDue  bool   // send an InAck even if nothing new was written
	closeIn   bool
	inBroken  bool
	inWake    *sync.Cond

	reaped    bool
	reapOOM   int64 // the OOM kill count when reaped
	spawned   time.Time
	usage     wire.Usage // what it used, once reaped
	code, sig int
	exit      *wire.Exited
	forgotten bool
	// track records what p's tree touches; changes is its report, made
	// once p ended (computing: being made, without s.mu), before exit is
	// set: a process with an exit always has its changes.
	track *tracker
	// heavy: its tracking or its report was large enough that the
	// warden gives memory back when it is forgotten.
	heavy     bool
	changes   *wire.Changes
	computing bool
	// forgetOnReap: the runtime forgot p before its reap; p was killed
	// and is dropped once reaped (unless a later Resume takes it back).
	forgetOnReap bool
}

// ringPool holds the output rings of processes that emptied theirs (the
// garbage collector empties it when they stay idle).
var ringPool sync.Pool

// tail returns up to n bytes of free space after p's output, contiguous in
// its ring (grown, up to the window, to hold n more), for a pump to read
// into; commit then adds what was read. The caller holds s.mu from tail to
// commit (the read in between is done with it held), and read-acked+n is
// within the window.
func (p *proc) tail(n int, window int64) []byte {
	live := int(p.read - p.acked)
	if live+n > len(p.data) {
		size := max(2*len(p.data), live+n, 4096)
		if int64(size) > window {
			size = max(int(window), live+n)
		}
		var nd []byte
		if b, ok := ringPool.Get().(*[]byte); ok && len(*b) == size {
			nd = *b
		} else {
			nd = make([]byte, size)
		}
		if live > 0 {
			k := copy(nd, p.data[p.head:min(p.head+live, len(p.data))])
			copy(nd[k:], p.data[:live-k])
		}
		p.data, p.head = nd, 0
	}
	start := p.head + live
	if start >= len(p.data) {
		start -= len(p.data)
		return p.data[start:min(start+n, p.head)]
	}
	return p.data[start:min(start+n, len(p.data))]
}

// commit adds the first m bytes of the last tail (read from stream) to the
// output sequence and returns what they cost against the total cap. The
// caller holds s.mu.
func (p *proc) commit(stream byte, m int) int64 {
	p.read += uint64(m)
	if stream == 2 {
		p.readErr += uint64(m)
	}
	cost := int64(m)
	if n := len(p.runs); n > 0 && p.runs[n-1].stream == stream {
		p.runs[n-1].end = p.read
	} else {
		p.runs = append(p.runs, outRun{end: p.read, stream: stream})
		cost += runCost
	}
	return cost
}

// ackTo frees the output below off (acked <= off <= read) and returns what
// that gives back to the total cap. The caller holds s.mu.
func (p *proc) ackTo(off uint64) int64 {
	freed := int64(off - p.acked)
	if len(p.data) > 0 {
		p.head = (p.head + int(off-p.acked)) % len(p.data)
	}
	p.acked = off
	i := 0
	for i < len(p.runs) && p.runs[i].end <= off {
		i++
	}
	p.runs = p.runs[i:]
	freed += int64(i) * runCost
	if p.acked == p.read {
		// Nothing held: an idle process should not keep a window's
		// worth of memory.
		p.head = 0
		if len(p.data) > 64<<10 {
			// Pooled, not kept: a child that streams with a reader
			// that keeps up empties its ring often, and would
			// otherwise allocate a window's worth each time.
			b := p.data
			ringPool.Put(&b)
			p.data = nil
		}
	}
	return freed
}

// peek returns up to max bytes of one stream from offset off (acked <= off <
// read), contiguous in the ring, aliasing p.data: copy before unlocking.
func (p *proc) peek(off uint64, max int) (byte, []byte) {
	i := sort.Search(len(p.runs), func(i int) bool { return p.runs[i].end > off })
	r := p.runs[i]
	n := r.end - off
	if n > uint64(max) {
		n = uint64(max)
	}
	start := p.head + int(off-p.acked)
	if start >= len(p.data) {
		start -= len(p.data)
	}
	end := min(start+int(n), len(p.data))
	return r.stream, p.data[start:end]
}

// running is what a Table and Forget call running: not yet reaped.
func (p *proc) running() bool { return !p.reaped }

// entry is p's row in a Table.
func (p *proc) entry() wire.Entry {
	e := wire.Entry{Channel: p.ch, ID: p.id, PID: p.pid, PGID: p.pid, Running: p.running(), Acked: p.acked, Output: p.read}
	if p.exit != nil {
		x := *p.exit
		e.Exit = &x
	}
	return e
}

// maybeEnded records the end once the child is reaped and every output
// stream reached its end, and queues Exited. The caller holds s.mu.
func (s *state) maybeEnded(p *proc) {
	if p.exit != nil || !p.reaped || p.open > 0 || p.forgotten {
		return
	}
	if p.changes == nil {
		// Made without s.mu (an lstat per touched path, a hash per
		// listed file); this runs again once they are ready.
		if !p.computing {
			p.computing = true
			go func() {
				c := p.track.changes()
				s.mu.Lock()
				p.changes = c
				s.maybeEnded(p)
				s.mu.Unlock()
			}()
		}
		return
	}
	p.exit = &wire.Exited{Code: p.code, Signal: p.sig, Output: p.read, Stdout: p.read - p.readErr, Stderr: p.readErr, OOMKills: s.sys.oomKills(), Usage: p.usage}
	s.kick(p)
}

// kick puts p on the current link's ready list if it has something to send.
// The caller holds s.mu.
func (s *state) kick(p *proc) {
	l := s.link
	if l == nil || p.queued || p.forgotten || !p.hasWork() {
		return
	}
	p.queued = true
	l.ready = append(l.ready, p)
	l.wake.Signal()
}

func (p *proc) hasWork() bool {
	if !p.sending {
		return false
	}
	if p.stdin != nil && (p.inWritten > p.inAckSent || p.inAckDue) {
		return true
	}
	return p.reaped && !p.reapSent || p.sent < p.read || (p.exit != nil && (!p.exitSent || !p.changesSent))
}

// forget drops p and everything it holds. The caller holds s.mu.
func (s *state) forget(p *proc) {
	p.forgotten = true
	if p.heavy {
		// Its tracking and its report are garbage now.
		p.changes = nil
		giveBack()
	}
	s.total -= int64(p.read-p.acked) + int64(len(p.runs))*runCost
	p.data, p.runs, p.in = nil, nil, nil
	p.acked = p.read
	delete(s.procs, p.ch)
	if !p.reaped {
		delete(s.byPID, p.pid)
	}
	// Closed without s.mu: closing a polled fd waits for a read in
	// progress, and a pump's read holds s.mu.
	files := append([]*os.File(nil), p.outs...)
	if p.stdin != nil {
		files = append(files, p.stdin)
	}
	if p.master != nil {
		files = append(files, p.master)
	}
	go func() {
		for _, f := range files {
			_ = f.Close() // the process is forgotten: nothing of its streams is kept
		}
	}()
	p.window.Broadcast()
	p.inWake.Broadcast()
	s.space.Broadcast()
}
