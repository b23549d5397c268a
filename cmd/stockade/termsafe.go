package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"unicode"
	"unicode/utf16"
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

// newEncoder is the CLI's JSON encoder: encoding/json escapes the C0
// controls but writes DEL, the C1 controls (U+0080–U+009F) and format runes
// such as the bidi overrides as they are, which a terminal showing --json
// output may obey. jsonTermWriter escapes those too (\uXXXX, the same
// string to any JSON reader).
func newEncoder(w io.Writer) *json.Encoder { return json.NewEncoder(jsonTermWriter{w}) }

// jsonTermWriter rewrites JSON text so that every rune a terminal could
// take for a control is a \u escape. It relies on what json.Encoder
// writes: valid UTF-8, a whole value per Write, and such runes only inside
// strings (outside them JSON has ASCII only).
type jsonTermWriter struct{ w io.Writer }

func (j jsonTermWriter) Write(p []byte) (int, error) {
	if printableJSON(p) {
		return j.w.Write(p)
	}
	out := make([]byte, 0, len(p)+16)
	for i := 0; i < len(p); {
		r, n := utf8.DecodeRune(p[i:])
		if r < utf8.RuneSelf && r != 0x7f || r >= utf8.RuneSelf && unicode.IsPrint(r) {
			out = append(out, p[i:i+n]...)
		} else if r1, r2 := utf16.EncodeRune(r); r1 != utf8.RuneError {
			out = fmt.Appendf(out, `\u%04x\u%04x`, r1, r2)
		} else {
			out = fmt.Appendf(out, `\u%04x`, r)
		}
		i += n
	}
	if _, err := j.w.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// printableJSON: no rune past ASCII that is not printable (ASCII is the
// encoder's to escape).
func printableJSON(p []byte) bool {
	for i := 0; i < len(p); {
		if p[i] < utf8.RuneSelf {
			if p[i] == 0x7f {
				return false
			}
			i++
			continue
		}
		r, n := utf8.DecodeRune(p[i:])
		if !unicode.IsPrint(r) {
			return false
		}
		i += n
	}
	return true
}
