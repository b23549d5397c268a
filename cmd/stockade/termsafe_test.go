package main

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"testing/quick"
	"unicode"
	"unicode/utf8"
)

// terminalSafe: the property every termSafe result has: valid UTF-8 with
// no rune a terminal could take for a control (C0, DEL, C1, format runes
// such as bidi overrides, line and paragraph separators).
func terminalSafe(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if !unicode.IsPrint(r) || r == 0x7f || r >= 0x80 && r <= 0x9f {
			return false
		}
	}
	return true
}

func TestTermSafe(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
	}{
		{"plain", "api.example.com", "api.example.com"},
		{"spaces and punctuation", "sh -c 'echo hi; ls /'", "sh -c 'echo hi; ls /'"},
		{"printable unicode", "café ✓ 日本", "café ✓ 日本"},
		{"empty", "", ""},
		{"ESC", "\x1b", `"\x1b"`},
		{"CSI clear", "x\x1b[2Jy", `"x\x1b[2Jy"`},
		{"OSC retitle", "\x1b]0;pwned\x07", `"\x1b]0;pwned\a"`},
		{"BEL", "ding\a", `"ding\a"`},
		{"carriage return", "ok\rFAIL", `"ok\rFAIL"`},
		{"backspace", "abc\b\b\b", `"abc\b\b\b"`},
		{"NUL", "a\x00b", `"a\x00b"`},
		{"newline", "a\nb", `"a\nb"`},
		{"tab", "a\tb", `"a\tb"`},
		{"DEL", "a\x7f", `"a\x7f"`},
		{"invalid UTF-8", "a\xffb", `"a\xffb"`},
		{"lone C1 byte", "\x9b2J", `"\x9b2J"`},
		{"C1 CSI as UTF-8", "\u009b2J", `"\u009b2J"`},
		{"bidi override", "evil\u202egnp.exe", `"evil\u202egnp.exe"`},
		{"bidi isolate", "\u2066x\u2069", `"\u2066x\u2069"`},
		{"zero width", "a\u200bb", `"a\u200bb"`},
		{"line separator", "a\u2028b", `"a\u2028b"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := termSafe(tc.in)
			if got != tc.want {
				t.Errorf("termSafe(%q) = %s, want %s", tc.in, got, tc.want)
			}
			if !terminalSafe(got) {
				t.Errorf("termSafe(%q) = %q still holds a control", tc.in, got)
			}
			if got != tc.in {
				// Escaped, not lost: the quoted form reads back exactly.
				if back, err := strconv.Unquote(got); err != nil || back != tc.in {
					t.Errorf("Unquote(%s) = %q, %v; want %q", got, back, err, tc.in)
				}
			}
		})
	}
}

// TestTermSafeProperty: for any string, the result is safe for a terminal
// and says the input exactly (as it is, or quoted).
func TestTermSafeProperty(t *testing.T) {
	prop := func(b []byte) bool { return termSafeHolds(string(b)) }
	if err := quick.Check(prop, &quick.Config{MaxCount: 20000}); err != nil {
		t.Fatal(err)
	}
	// Every single rune of the first planes and every single byte.
	for r := rune(0); r < 0x30000; r++ {
		if !termSafeHolds(string(r)) {
			t.Fatalf("termSafe(%q) = %q", string(r), termSafe(string(r)))
		}
	}
	for b := 0; b < 256; b++ {
		if !termSafeHolds(string([]byte{byte(b)})) {
			t.Fatalf("termSafe(%q) = %q", []byte{byte(b)}, termSafe(string([]byte{byte(b)})))
		}
	}
}

func FuzzTermSafe(f *testing.F) {
	for _, s := range []string{"", "x", "\x1b]0;t\a", "\u009b", "\u202e", "\xff\xfe", "a\r\b\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !termSafeHolds(s) {
			t.Fatalf("termSafe(%q) = %q", s, termSafe(s))
		}
	})
}

func termSafeHolds(s string) bool {
	got := termSafe(s)
	if !terminalSafe(got) {
		return false
	}
	if got == s {
		return true
	}
	back, err := strconv.Unquote(got)
	return err == nil && back == s
}

// TestJSONTermWriter: the CLI's JSON escapes every rune a terminal could
// obey (DEL, C1, bidi and other format runes, beyond the C0 controls
// encoding/json escapes itself) and still decodes to the same strings.
func TestJSONTermWriter(t *testing.T) {
	check := func(s string) bool {
		var b bytes.Buffer
		if err := newEncoder(&b).Encode(map[string]string{"k" + s: s}); err != nil {
			return false
		}
		if !terminalSafe(strings.TrimSuffix(b.String(), "\n")) {
			t.Logf("%q encodes as %q", s, b.String())
			return false
		}
		var back map[string]string
		if err := json.Unmarshal(b.Bytes(), &back); err != nil {
			return false
		}
		// encoding/json makes each invalid byte U+FFFD; the rest comes back.
		var want strings.Builder
		for _, r := range s {
			want.WriteRune(r) // an invalid byte ranges as U+FFFD
		}
		return back["k"+want.String()] == want.String()
	}
	for _, s := range []string{"plain", "\x1b]0;t\a", "\u009b2J", "a\x7fb", "evil\u202egnp", "\u2066x\u2069", "a\u200bb", "\U000e0001tag", "日本 ✓", "\xff"} {
		if !check(s) {
			t.Errorf("%q", s)
		}
	}
	if err := quick.Check(func(b []byte) bool { return check(string(b)) }, &quick.Config{MaxCount: 5000}); err != nil {
		t.Fatal(err)
	}
}

// TestShortCutsOnRunes: a cut summary stays valid UTF-8, so termSafe
// leaves it as it is.
func TestShortCutsOnRunes(t *testing.T) {
	s := strings.Repeat("a", 78) + "éé"
	got := short(s, 80)
	if !utf8.ValidString(got) || termSafe(got) != got || !strings.HasSuffix(got, "a…") {
		t.Fatalf("short(%q) = %q", s, got)
	}
}
