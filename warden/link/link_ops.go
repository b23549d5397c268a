package link

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/stockade/stockade/warden/wire"
)

// The link's requests: Spawn, List, Resume and Rekey, each waiting for
// the warden's answer or the caller's end.

// alloc returns a free channel (l.mu held; fewer than MaxProcesses in use).
// Channels count up, so a channel is reused only after 2³² spawns.
func (l *Link) alloc() uint32 {
	for {
		ch := l.next
		l.next++
		if ch == 0 {
			continue
		}
		if _, ok := l.procs[ch]; ok {
			continue
		}
		if _, ok := l.retired[ch]; ok {
			continue
		}
		if _, ok := l.listed[ch]; ok {
			continue
		}
		return ch
	}
}

// Spawn starts a process: it picks a free channel, sends Spawn and waits
// for the warden's answer. It returns the Proc once Started arrived, a
// *SpawnError if the warden answered SpawnFailed (the process never ran),
// the link's error if the link ended, or ctx's error.
//
// A Spawn whose ctx ends first leaves its channel reserved until the
// warden answers. If the answer is Started, the link sends Signal SIGKILL
// (to the group), drops the process's output, and sends Forget once the
// warden reports it reaped: a spawn whose caller gave up may run briefly,
// never unattended, and costs no other process anything.
func (l *Link) Spawn(ctx context.Context, s wire.Spawn) (*Proc, error) {
	if err := s.Validate(); err != nil {
		return nil, fmt.Errorf("warden: spawn %q: %w", s.ID, err)
	}
	payload, err := json.Marshal(&s)
	if err != nil {
		return nil, fmt.Errorf("warden: spawn %q: %w", s.ID, err)
	}
	if len(payload) > wire.MaxPayload {
		return nil, fmt.Errorf("warden: spawn %q: %d bytes of request, more than %d", s.ID, len(payload), wire.MaxPayload)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	l.mu.Lock()
	if l.err != nil {
		l.mu.Unlock()
		return nil, l.err
	}
	if len(l.procs) >= wire.MaxProcesses {
		l.mu.Unlock()
		return nil, fmt.Errorf("warden: spawn %q: %d processes on this link already", s.ID, wire.MaxProcesses)
	}
	p := l.newProc(l.alloc(), s.ID)
	p.stdin = s.Stdin
	p.state = statePending
	p.spawned = make(chan error, 1)
	l.procs[p.Channel] = p
	l.mu.Unlock()

	if err := l.sent(l.w.Write(wire.TSpawn, p.Channel, payload)); err != nil {
		return nil, err
	}
	if s.Sent != nil {
		s.Sent()
	}
	select {
	case err := <-p.spawned:
		return p.spawnResult(err)
	case <-l.done:
		return nil, l.Err()
	case <-ctx.Done():
		l.mu.Lock()
		if p.state == statePending {
			p.state = stateAbandoned
			l.mu.Unlock()
			return nil, ctx.Err()
		}
		l.mu.Unlock()
		// The answer came first: take it.
		return p.spawnResult(<-p.spawned)
	}
}

// List asks the warden for its process table. It also keeps the channels
// the table names from being picked by Spawn.
func (l *Link) List(ctx context.Context) ([]wire.Entry, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c := make(chan []wire.Entry, 1)
	l.listMu.Lock()
	l.mu.Lock()
	if l.err != nil {
		l.mu.Unlock()
		l.listMu.Unlock()
		return nil, l.err
	}
	l.listSent++
	id := l.listSent
	l.listWait[id] = c
	l.mu.Unlock()
	err := l.sent(l.w.Write(wire.TList, 0))
	l.listMu.Unlock()
	if err != nil {
		return nil, err
	}
	select {
	case t := <-c:
		return t, nil
	case <-l.done:
		return nil, l.Err()
	case <-ctx.Done():
		l.mu.Lock()
		delete(l.listWait, id)
		l.mu.Unlock()
		select {
		case t := <-c:
			return t, nil
		default:
			return nil, ctx.Err()
		}
	}
}

// Resume returns a Proc for a process the warden listed (after a
// reattach): the channel is opened on this link with its output starting
// at from (at least e.Acked, at most e.Output: the offset the runtime has
// recorded), and Resume(from) is sent, followed by Ack(from) when from is
// beyond e.Acked. If e.Exit is set the Proc's exit is known at once (the
// warden may send that Exited once more). A resumed Proc has no stdin (its offset is unknown) and OOMKills -1.
func (l *Link) Resume(ctx context.Context, e wire.Entry, from uint64) (*Proc, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if e.Channel == 0 || wire.CheckID(e.ID) != nil || e.Acked > e.Output || from < e.Acked || from > e.Output || e.Exit != nil && from > e.Exit.Output {
		return nil, fmt.Errorf("warden: resume %q on channel %d from %d: outside acked %d .. output %d", e.ID, e.Channel, from, e.Acked, e.Output)
	}
	l.mu.Lock()
	if l.err != nil {
		l.mu.Unlock()
		return nil, l.err
	}
	if _, ok := l.procs[e.Channel]; ok {
		l.mu.Unlock()
		return nil, fmt.Errorf("warden: resume %q: channel %d is in use on this link", e.ID, e.Channel)
	}
	if _, ok := l.retired[e.Channel]; ok {
		l.mu.Unlock()
		return nil, fmt.Errorf("warden: resume %q: channel %d was forgotten on this link", e.ID, e.Channel)
	}
	p := l.newProc(e.Channel, e.ID)
	p.PID, p.PGID, p.OOMKills = e.PID, e.PGID, -1
	p.state = stateStarted
	p.resumed = true
	p.received, p.consumed, p.acked = from, from, from
	if e.Exit != nil {
		x := *e.Exit
		p.exit = &x
		p.tableExit = true
		p.endExited()
		p.setReaped(wire.Reaped{Code: x.Code, Signal: x.Signal, OOMKills: x.OOMKills})
	}
	l.procs[e.Channel] = p
	delete(l.listed, e.Channel)
	l.mu.Unlock()
	if err := l.sent(l.w.WriteOffset(wire.TResume, e.Channel, from)); err != nil {
		return nil, err
	}
	if from > e.Acked {
		if err := l.sent(l.w.WriteOffset(wire.TAck, e.Channel, from)); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// Rekey replaces the warden's secret with secret (SecretSize bytes): once it
// returns nil, a reattach must authenticate with secret, and one with the
// old secret is refused. It returns once the warden answered Rekeyed.
//
// Any other outcome leaves the warden's secret unknown (it may have taken
// the new one or not): the error then matches ErrRekeyUnconfirmed and wraps
// why: the link's error (ErrLinkClosed, a *ProtocolError, the transport's)
// or ctx's. A runtime that must reattach then tries the new secret, then
// the old. A secret of the wrong size is refused before anything is sent
// (and is not ErrRekeyUnconfirmed).
func (l *Link) Rekey(ctx context.Context, secret []byte) error {
	if len(secret) != wire.SecretSize {
		return fmt.Errorf("warden: rekey: a secret of %d bytes, not %d", len(secret), wire.SecretSize)
	}
	m := wire.Rekey{Secret: hex.EncodeToString(secret)}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("warden: rekey: %w", err)
	}
	c := make(chan struct{})
	// listMu orders the control requests' sequence numbers with their
	// frames on the stream.
	l.listMu.Lock()
	l.mu.Lock()
	if l.err != nil {
		err := l.err
		l.mu.Unlock()
		l.listMu.Unlock()
		return fmt.Errorf("warden: rekey: %w", err)
	}
	l.rekeySent++
	id := l.rekeySent
	l.rekeyWait[id] = c
	l.mu.Unlock()
	err := l.sent(l.w.WriteJSON(wire.TRekey, 0, &m))
	l.listMu.Unlock()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrRekeyUnconfirmed, err)
	}
	select {
	case <-c:
		return nil
	case <-l.done:
		// An answer that came with the link's end still counts.
		select {
		case <-c:
			return nil
		default:
		}
		return fmt.Errorf("%w: %w", ErrRekeyUnconfirmed, l.Err())
	case <-ctx.Done():
		l.mu.Lock()
		delete(l.rekeyWait, id)
		l.mu.Unlock()
		select {
		case <-c:
			return nil
		default:
			return fmt.Errorf("%w: %w", ErrRekeyUnconfirmed, ctx.Err())
		}
	}
}
