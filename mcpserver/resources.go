package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/spec"
)

// The resources: a sandbox's history and a process's output, by URI.
const (
	historyTemplate = "stockade://sandbox/{id}/history"
	outputTemplate  = "stockade://process/{id}/output"
	// maxResourceEvents bounds a history resource (the history tool
	// pages the rest).
	maxResourceEvents = 5000
	// updateEvery bounds how often a subscription is told of an update.
	updateEvery = 250 * time.Millisecond
)

// resourceID splits a resource URI into its kind ("sandbox" or
// "process") and id, refusing any other shape.
func resourceID(uri string) (kind, id string, err error) {
	rest, ok := strings.CutPrefix(uri, "stockade://")
	parts := strings.Split(rest, "/")
	if !ok || len(parts) != 3 || parts[1] == "" ||
		!(parts[0] == "sandbox" && parts[2] == "history" || parts[0] == "process" && parts[2] == "output") {
		return "", "", spec.Errorf(spec.CodeInvalidArgument, "mcp", "resource %q is not %s nor %s", uri, historyTemplate, outputTemplate)
	}
	return parts[0], parts[1], nil
}

// addResources registers the two resource templates and the
// subscriptions behind ServerOptions' handlers (subs).
func (t tools) addResources(s *mcp.Server) {
	s.AddResourceTemplate(&mcp.ResourceTemplate{Name: "sandbox-history", URITemplate: historyTemplate, MIMEType: "application/json",
		Description: "A sandbox's journaled events (its processes' included), oldest first, as JSON; subscribe to hear of new ones."}, t.readResource)
	s.AddResourceTemplate(&mcp.ResourceTemplate{Name: "process-output", URITemplate: outputTemplate, MIMEType: "text/plain",
		Description: "A process's recorded output (stdout and stderr in the order written), from its start, at most 4 MiB; subscribe to hear of new output."}, t.readResource)
}

func (t tools) readResource(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	uri := req.Params.URI
	kind, id, err := resourceID(uri)
	if err != nil {
		return nil, err
	}
	if kind == "sandbox" {
		page, err := t.historyUpTo(ctx, HistoryIn{SandboxID: id}, maxResourceEvents)
		if spec.IsCode(err, spec.CodeNotFound) {
			return nil, mcp.ResourceNotFoundError(uri)
		}
		if err != nil {
			return nil, toolError(err)
		}
		b, err := json.Marshal(page)
		if err != nil {
			return nil, toolError(spec.Wrap(spec.CodeInternal, "mcp", err, "encoding the history of %s", id))
		}
		return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: uri, MIMEType: "application/json", Text: string(b)}}}, nil
	}
	out, err := t.logs(ctx, LogsIn{ProcessID: id, MaxBytes: MaxOutput})
	if spec.IsCode(err, spec.CodeNotFound) {
		return nil, mcp.ResourceNotFoundError(uri)
	}
	if err != nil {
		return nil, toolError(err)
	}
	text := out.Output
	if out.More {
		text += fmt.Sprintf("\n[stockade: the output goes on past offset %d; the logs tool reads it from there]", out.NextOffset)
	}
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: uri, MIMEType: "text/plain", Text: text}}}, nil
}

// maxWatches bounds the resources watched at once.
const maxWatches = 64

// subscriptions watches the subscribed resources: one watcher per URI,
// whatever the number of subscriptions to it (counted: the last
// unsubscribe ends it), ended also by its resource's end (a process's
// exit, a sandbox's removal).
type subscriptions struct {
	t  tools
	mu sync.Mutex
	// srv is set once New has made the server.
	srv     *mcp.Server
	watches map[string]*watch
}

type watch struct {
	cancel context.CancelFunc
	refs   int
}

func newSubscriptions(t tools) *subscriptions {
	return &subscriptions{t: t, watches: map[string]*watch{}}
}

func (s *subscriptions) subscribe(ctx context.Context, req *mcp.SubscribeRequest) error {
	uri := req.Params.URI
	kind, id, err := resourceID(uri)
	if err != nil {
		return err
	}
	// Known now, or refused now: a subscription to nothing is a mistake.
	if kind == "sandbox" {
		_, err = s.t.rt.ReplaySandbox(ctx, id, 0)
	} else {
		_, err = s.t.rt.ReplayProcess(ctx, id, 0)
	}
	if err != nil {
		return toolError(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if w, ok := s.watches[uri]; ok {
		w.refs++
		return nil
	}
	if len(s.watches) >= maxWatches {
		return toolError(spec.Errorf(spec.CodeConflict, "mcp", "%d resources are watched already (the limit): unsubscribe from one first", maxWatches))
	}
	wctx, cancel := context.WithCancel(context.Background())
	w := &watch{cancel: cancel, refs: 1}
	s.watches[uri] = w
	go s.watch(wctx, w, uri, kind, id)
	return nil
}

func (s *subscriptions) unsubscribe(_ context.Context, req *mcp.UnsubscribeRequest) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w, ok := s.watches[req.Params.URI]; ok {
		if w.refs--; w.refs <= 0 {
			w.cancel()
			delete(s.watches, req.Params.URI)
		}
	}
	return nil
}

// errWatched ends a sandbox's watch at its removal.
var errWatched = errors.New("the sandbox was removed")

// watch tells the subscribers of uri of each change, at most once per
// updateEvery, until ctx ends or the resource does (a process's exit, a
// sandbox's removal); it then forgets the URI, whichever way it ended.
func (s *subscriptions) watch(ctx context.Context, w *watch, uri, kind, id string) {
	defer func() {
		s.mu.Lock()
		if s.watches[uri] == w {
			delete(s.watches, uri)
		}
		s.mu.Unlock()
		w.cancel()
	}()
	var last time.Time
	tell := func(force bool) {
		if !force && time.Since(last) < updateEvery {
			return
		}
		last = time.Now()
		s.mu.Lock()
		srv := s.srv
		s.mu.Unlock()
		if srv != nil {
			_ = srv.ResourceUpdated(ctx, &mcp.ResourceUpdatedNotificationParams{URI: uri}) // a session gone is the SDK's to drop
		}
	}
	if kind == "sandbox" {
		_ = s.t.rt.Follow(ctx, id, func(e host.HistoryEvent) error { // ends with ctx, or at the removal
			tell(false)
			if e.Kind == "sandbox" && e.Type == "sandbox.removed" {
				tell(true)
				return errWatched
			}
			return nil
		})
		return
	}
	p, err := s.t.rt.Process(ctx, id)
	if err != nil {
		return
	}
	_, _ = p.Attach(ctx, host.AttachOptions{}, func(host.OutputChunk) error { tell(false); return nil }) // ends with the process or ctx
	tell(true)                                                                                           // the end: the resource is whole
}
