package apiconv

import (
	"reflect"
	"strconv"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	stockadev1 "github.com/stockade/stockade/api/stockade/v1"
	"github.com/stockade/stockade/egress"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
)

// filler sets every exported field of a value, recursively, to a value
// of its own (no two fields alike), so a field a conversion forgets shows
// as a difference after the round trip.
type filler struct{ n int }

var (
	ruleType = reflect.TypeFor[spec.EgressRule]()
	timeType = reflect.TypeFor[time.Time]()
)

func (f *filler) fill(v reflect.Value) {
	f.n++
	switch {
	case v.Type() == ruleType:
		r, err := spec.ParseEgressRule("h" + strconv.Itoa(f.n) + ".example.com:" + strconv.Itoa(1+f.n%1000))
		if err != nil {
			panic(err)
		}
		v.Set(reflect.ValueOf(r))
		return
	case v.Type() == timeType:
		v.Set(reflect.ValueOf(time.Date(2026, 12, 6, 1, 2, 3, f.n, time.UTC)))
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString("s" + strconv.Itoa(f.n))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int64, reflect.Int32:
		v.SetInt(int64(f.n))
	case reflect.Uint, reflect.Uint64, reflect.Uint32, reflect.Uint16:
		v.SetUint(uint64(f.n))
	case reflect.Float64:
		v.SetFloat(float64(f.n) + 0.5)
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		f.fill(p.Elem())
		v.Set(p)
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 2, 2)
		for i := range 2 {
			f.fill(s.Index(i))
		}
		v.Set(s)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		f.fill(k)
		f.fill(e)
		m.SetMapIndex(k, e)
		v.Set(m)
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				f.fill(v.Field(i))
			}
		}
	default:
		panic("filler: no value for " + v.Type().String())
	}
}

func filled[T any]() T {
	var v T
	(&filler{}).fill(reflect.ValueOf(&v).Elem())
	return v
}

// wire sends m through its encoding, as the socket does.
func wire[M proto.Message](t *testing.T, m M) M {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	out := m.ProtoReflect().New().Interface().(M)
	if err := proto.Unmarshal(b, out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestRoundTrip: every field of every converted type survives the wire,
// filled and zero.
func TestRoundTrip(t *testing.T) {
	check := func(name string, in, out any) {
		t.Helper()
		if !reflect.DeepEqual(in, out) {
			t.Fatalf("%s differs after the wire:\n in  %+v\n out %+v", name, in, out)
		}
	}
	for _, zero := range []bool{false, true} {
		sb := filled[lifecycle.Sandbox]()
		pr := filled[lifecycle.Process]()
		ds := []egress.Decision{filled[egress.Decision]()}
		if zero {
			sb, pr, ds = lifecycle.Sandbox{}, lifecycle.Process{}, nil
		}
		gotSb, err := FromSandboxState(wire(t, SandboxState(sb)))
		if err != nil {
			t.Fatal(err)
		}
		// A secret's value never crosses the wire in a state (a folded
		// state holds none); its name and ref do.
		for _, v := range gotSb.Spec.Secrets {
			if v.Value != "" {
				t.Fatalf("a secret's value crossed the wire in a sandbox's state: %+v", v)
			}
		}
		sb.Spec.Secrets = spec.WithoutSecretValues(sb.Spec.Secrets)
		check("lifecycle.Sandbox", sb, gotSb)
		vars := []spec.SecretVar{filled[spec.SecretVar]()}
		if zero {
			vars = nil
		}
		check("secret variables (a create's, a SetSecrets')", vars, FromSecretVars(wire(t, &stockadev1.SetSecretsRequest{Secrets: SecretVars(vars)}).Secrets))
		check("lifecycle.Process", pr, FromProcessState(wire(t, ProcessState(pr))))
		got := FromDecisions(wire(t, &stockadev1.EgressResponse{Decisions: Decisions(ds)}).Decisions)
		if zero && len(got) == 0 {
			got = nil
		}
		check("egress.Decision", ds, got)
	}
}

// TestFromPolicyRefusesBadRules: a rule the wire carries is parsed as a
// command line's is.
func TestFromPolicyRefusesBadRules(t *testing.T) {
	_, err := FromPolicy(&stockadev1.Policy{Network: "allowlist", Egress: []string{"https://example.com"}})
	if !spec.IsCode(err, spec.CodeInvalidArgument) {
		t.Fatalf("%v, want invalid_argument", err)
	}
}
