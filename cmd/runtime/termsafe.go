package main

import (
	"strconv"
	"unicode"
	"unicode/utf8"
)

// termSafe is the one way a string a sandbox can control (process output in
// a view, egress hosts and users, argv, warden and error texts, paths) is
// printed in human output: as it is when every rune is printable, else
// quoted with strconv.Quote, which escapes every control byte (ESC, CSI,
// OSC, BEL, \r, \b, NUL, DEL), C1 controls (U+0080–U+009F), format runes
// such as the bidi overrides (U+202E) and invalid UTF-8. A terminal then
// shows what the sandbox sent instead of obeying it; the quotes say that
// something was escaped. --json output is left to the JSON encoder, and the
// output bytes `stockade logs` writes stay raw (they are the process's
// own).
func termSafe(s string) string {
	if printable(s) {
		return s
	}
	return strconv.Quote(s)
}

// printable: valid UTF-8 whose every rune is printable (unicode.IsPrint:
// letters, marks, numbers, punctuation, symbols and the ASCII space).
func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}
