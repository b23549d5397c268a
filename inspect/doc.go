// Package inspect reads a stockade journal without running anything: a
// sandbox's history, the state of a sandbox or a process folded up to any
// sequence, what changed between two sequences, the live index, a full
// verification and a JSON-lines export.
//
// A Reader implements host.Inspector, the inspection half of the API the
// embedded runtime and the client share, so a tool asks the same questions
// of a journal file (Open), of a journal a runtime holds (New, which the
// runtime uses for its own inspection calls) or of a served runtime
// (client.Dial), and gets the same answers.
//
// It knows nothing of Docker or of actors: it reads journal records and
// folds them with lifecycle's transition functions, the same ones the live
// actors apply, so a replay is what the actor held at that point.
package inspect
