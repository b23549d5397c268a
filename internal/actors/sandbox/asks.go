package sandbox

import (
	"sort"

	"github.com/stockade/stockade/internal/actors/process"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
)

// Every ask of a sandbox actor gets an answer or an error. The asks the
// actor may hold across messages (a launch waiting for its warden or for a
// thaw, a rollback under way) are kept in a ledger from the moment they
// arrive until they are answered or handed on (a launch to its process
// actor, which answers it). An actor that stops with asks still open
// answers each with an error; if its sandbox was removed by then, the ask
// was forgotten, not merely cut short by a closing runtime, and the actor
// reports it (Params.Unanswered): a checked invariant the tests and the
// drill assert on.

// ledger is the asks a sandbox actor holds: key → how to answer it with an
// error.
type ledger map[string]func(error)

func launchKey(id string) string { return "launch " + id }

// openLaunch enters a launch in the ledger.
func (a *sandboxActor) openLaunch(m Launch) {
	if a.asks == nil {
		a.asks = ledger{}
	}
	a.asks[launchKey(m.ID)] = func(err error) { m.Reply <- process.Launch{Err: err} }
}

// answerLaunch answers a launch and closes its entry.
func (a *sandboxActor) answerLaunch(m Launch, r process.Launch) {
	delete(a.asks, launchKey(m.ID))
	m.Reply <- r
}

// handedOn closes a launch's entry once its process actor owns the answer.
func (a *sandboxActor) handedOn(m Launch) { delete(a.asks, launchKey(m.ID)) }

// openAsk enters another kind of ask (a rollback) in the ledger.
func (a *sandboxActor) openAsk(key string, answer func(error)) {
	if a.asks == nil {
		a.asks = ledger{}
	}
	a.asks[key] = answer
}

func (a *sandboxActor) closeAsk(key string) { delete(a.asks, key) }

// answerOpenAsks answers what is left in the ledger as the actor stops, and
// reports the asks a removed sandbox forgot.
func (a *sandboxActor) answerOpenAsks() {
	if len(a.asks) == 0 {
		return
	}
	keys := make([]string, 0, len(a.asks))
	for k := range a.asks {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	removed := a.state.Phase == lifecycle.PhaseRemoved
	for _, k := range keys {
		var err error
		if removed {
			err = spec.Errorf(spec.CodeInternal, "sandbox", "sandbox %s was removed with this ask (%s) unanswered: a runtime defect, please report it", a.p.ID, k)
		} else {
			err = spec.Errorf(spec.CodeAdmissionClosed, "sandbox", "sandbox %s: the runtime closed before this ask (%s) was answered", a.p.ID, k)
		}
		a.asks[k](err)
	}
	a.asks = nil
	if removed {
		a.deps.Log.Error("a removed sandbox left asks unanswered", "sandbox", a.p.ID, "asks", keys)
		if a.p.Unanswered != nil {
			a.p.Unanswered(keys)
		}
	}
}
