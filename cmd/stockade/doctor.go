package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/stockade/stockade/statedir"

	"github.com/stockade/stockade"
	"github.com/stockade/stockade/profile"

	"github.com/stockade/stockade/helpers"
)

type doctorCmd struct{ g global }

func parseDoctor(g global, args []string) (command, error) {
	c := &doctorCmd{g: g}
	pos, err := parseArgs(newFlags("doctor", &c.g), args)
	if err != nil {
		return nil, err
	}
	if err := wantArgs("doctor", pos, 0, "stockade doctor"); err != nil {
		return nil, err
	}
	return c, nil
}

// helperReport is what doctor says of one helper binary: where it comes
// from and, for an embedded one, whether its installed file is there and
// whole. Doctor writes nothing: an embedded helper is installed by the
// first sandbox that needs it.
type helperReport struct {
	*helpers.Binary
	// Installed: the embedded binary's file is there with its digest.
	Installed bool `json:"installed"`
}

func (c *doctorCmd) execute(ctx context.Context, _ io.Reader, stdout, stderr io.Writer) int {
	rep, err := stockade.Doctor(ctx, c.g.profile)
	if err != nil {
		return fail(stderr, err, 1)
	}
	path := c.g.journal
	if path == "" {
		if path, err = statedir.DefaultJournal(); err != nil {
			return fail(stderr, err, 1)
		}
	}
	dir := statedir.Helpers(path)
	// The warden every sandbox gets: named and checked, or embedded.
	w, werr := locateHelper(helpers.Warden, dir)
	// The egress proxy only allowlist sandboxes need: its absence refuses
	// them, not the runtime.
	e, eerr := locateHelper(helpers.Egress, dir)
	p := &printer{w: stdout}
	if c.g.json {
		out := struct {
			profile.Report
			Warden      *helperReport `json:"warden,omitempty"`
			WardenError string        `json:"warden_error,omitempty"`
			Egress      *helperReport `json:"egress,omitempty"`
			EgressError string        `json:"egress_error,omitempty"`
		}{Report: rep, Warden: w, Egress: e}
		if werr != nil {
			out.WardenError = werr.Error()
		}
		if eerr != nil {
			out.EgressError = eerr.Error()
		}
		p.keep(json.NewEncoder(p).Encode(out))
	} else {
		_, _ = rep.WriteTo(p) // its write error is p's
		if werr != nil {
			p.printf("warden    refused: %v\n", werr)
		} else {
			p.printf("warden    %s\n", w.describe())
		}
		if eerr != nil {
			p.printf("egress    unavailable (allowlist sandboxes are refused): %v\n", eerr)
		} else {
			p.printf("egress    %s\n", e.describe())
		}
	}
	if err := p.Err(); err != nil {
		return fail(stderr, err, 1)
	}
	if err := rep.Err(); err != nil {
		return fail(stderr, err, 1)
	}
	if werr != nil {
		return fail(stderr, werr, 1)
	}
	return 0
}

func locateHelper(h helpers.Helper, dir string) (*helperReport, error) {
	b, err := helpers.Locate(h, "", dir)
	if err != nil {
		return nil, err
	}
	return &helperReport{Binary: b, Installed: b.Source == helpers.FromEmbedded && b.Verify() == nil}, nil
}

// describe is the helper's doctor line after its name.
func (r *helperReport) describe() string {
	b := r.Binary
	if b.Source != helpers.FromEmbedded {
		return fmt.Sprintf("%s (named by $%s; %s, static, %d bytes, sha256 %s)", termSafe(b.Path), b.Helper.Env, b.Version, b.Size, b.SHA256)
	}
	state := "installed at"
	if !r.Installed {
		state = "written on first use to"
	}
	return fmt.Sprintf("embedded (%s, static, built by %s, %d bytes, sha256 %s), %s %s", b.Version, b.GoVersion, b.Size, b.SHA256, state, termSafe(b.Path))
}
