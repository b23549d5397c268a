package spec

import "testing"

func TestRecordOver(t *testing.T) {
	def := Record{Head: DefaultRecordHead, Tail: DefaultRecordTail}
	for _, tc := range []struct {
		name      string
		r, def    Record
		want      Record
		wantValid bool
	}{
		{"zero takes the runtime's", Record{}, Record{Head: 8 << 10, Tail: 16 << 10}, Record{Head: 8 << 10, Tail: 16 << 10}, true},
		{"zero over a zero runtime", Record{}, Record{}, def, true},
		{"off", Record{Off: true}, Record{}, Record{Off: true}, true},
		{"runtime off", Record{}, Record{Off: true}, Record{Off: true}, true},
		{"a bound records under a runtime off", Record{Tail: 8 << 20}, Record{Off: true}, Record{Head: DefaultRecordHead, Tail: 8 << 20}, true},
		{"one field over the runtime's", Record{Head: 1 << 20}, Record{Head: 8 << 10, Tail: 16 << 10}, Record{Head: 1 << 20, Tail: 16 << 10}, true},
		{"off with a bound", Record{Off: true, Head: 8 << 10}, Record{}, Record{Off: true}, false},
		{"negative", Record{Head: -1}, Record{}, Record{}, false},
		{"under the minimum", Record{Tail: MinRecordBound - 1}, Record{}, Record{}, false},
		{"over the maximum", Record{Tail: MaxRecordBound + 1}, Record{}, Record{}, false},
	} {
		err := tc.r.Validate()
		if (err == nil) != tc.wantValid || err != nil && !IsCode(err, CodeInvalidArgument) {
			t.Errorf("%s: Validate = %v", tc.name, err)
		}
		if tc.wantValid {
			if got := tc.r.Over(tc.def); got != tc.want {
				t.Errorf("%s: Over = %+v, want %+v", tc.name, got, tc.want)
			}
		}
	}
}
