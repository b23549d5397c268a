package spec

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
)

func TestSecretVarsValidate(t *testing.T) {
	img := "sha256:" + strings.Repeat("0", 64)
	for _, c := range []struct {
		name    string
		env     []string
		secrets []SecretVar
		why     string // "": valid
	}{
		{name: "valid", env: []string{"A=1"}, secrets: []SecretVar{{Name: "TOKEN", Ref: "secret ns/creds key token", Value: "s"}}},
		{name: "bad name", secrets: []SecretVar{{Name: "1X", Value: "s"}}, why: "not a variable name"},
		{name: "also in env", env: []string{"TOKEN=1"}, secrets: []SecretVar{{Name: "TOKEN", Value: "s"}}, why: "also in env"},
		{name: "twice", secrets: []SecretVar{{Name: "T", Value: "a"}, {Name: "T", Value: "b"}}, why: "given twice"},
		{name: "long ref", secrets: []SecretVar{{Name: "T", Ref: strings.Repeat("r", MaxSecretRefBytes+1)}}, why: "ref is"},
		{name: "control in ref", secrets: []SecretVar{{Name: "T", Ref: "a\nb"}}, why: "control character"},
		{name: "NUL in value", secrets: []SecretVar{{Name: "T", Value: "a\x00b"}}, why: "NUL"},
		{name: "too big", secrets: []SecretVar{{Name: "T", Value: strings.Repeat("v", MaxArgvEnvBytes)}}, why: "over the limit"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := Sandbox{Image: img, Env: c.env, Secrets: c.secrets}.WithDefaults().Validate()
			if c.why == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !IsCode(err, CodeInvalidArgument) || !strings.Contains(err.Error(), c.why) {
				t.Fatalf("%v, want invalid_argument saying %q", err, c.why)
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Fatal("the error names a value")
			}
		})
	}
}

// A secret's value is never in the JSON of a spec (what the journal
// writes); its name and ref are.
func TestSecretValueNeverMarshalled(t *testing.T) {
	b, err := json.Marshal(Sandbox{Secrets: []SecretVar{{Name: "TOKEN", Ref: "secret ns/creds", Value: "s3cret"}}})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "s3cret") || !strings.Contains(string(b), "TOKEN") || !strings.Contains(string(b), "secret ns/creds") {
		t.Fatalf("%s", b)
	}
	if got := WithoutSecretValues([]SecretVar{{Name: "A", Ref: "r", Value: "v"}}); got[0].Value != "" || got[0].Name != "A" || got[0].Ref != "r" {
		t.Fatalf("%+v", got)
	}
}

func TestSecretEnv(t *testing.T) {
	got := SecretEnv(map[string]string{"TOKEN": "s", "MODE": "secret", "A": "a"}, []string{"MODE=own", "X=1"})
	if want := []string{"A=a", "TOKEN=s", "MODE=own", "X=1"}; !slices.Equal(got, want) {
		t.Fatalf("%q, want %q (the process's own variable wins)", got, want)
	}
	if got := SecretEnv(nil, []string{"X=1"}); !slices.Equal(got, []string{"X=1"}) {
		t.Fatalf("%q", got)
	}
}

// A SecretVar printed, however it is printed, never shows its value.
func TestSecretVarPrinted(t *testing.T) {
	v := SecretVar{Name: "TOKEN", Ref: "secret ns/creds key token", Value: "s3cret"}
	type msg struct {
		Secrets []SecretVar
		Reply   chan error
	}
	var buf strings.Builder
	log := slog.New(slog.NewTextHandler(&buf, nil))
	log.Info("x", "msg", msg{Secrets: []SecretVar{v}}, "var", v)
	for _, got := range []string{fmt.Sprint(v), fmt.Sprintf("%+v", msg{Secrets: []SecretVar{v}}), fmt.Sprintf("%#v", v), fmt.Sprintf("%v", []SecretVar{v}), buf.String()} {
		if strings.Contains(got, "s3cret") || !strings.Contains(got, "TOKEN") {
			t.Errorf("printed %q", got)
		}
	}
}
