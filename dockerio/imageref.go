package dockerio

import (
	"strings"

	"github.com/distribution/reference"

	"github.com/stockade/stockade/spec"
)

// checkImageRef judges a reference by Docker's grammar before any call, so
// a malformed one is the caller's error (invalid_argument, saying what the
// grammar is), not the engine's: an image ID (sha256:…) or a prefix of one,
// or [REGISTRY/]NAME[:TAG][@DIGEST] with the name in lower case.
func checkImageRef(ref string) error {
	if ref == "" {
		return spec.Errorf(spec.CodeInvalidArgument, "dockerio.image", "image reference is empty")
	}
	if spec.IsImageID(ref) || isHex(ref) {
		return nil
	}
	if _, err := reference.ParseNormalizedNamed(ref); err != nil {
		hint := ""
		if lower := strings.ToLower(ref); lower != ref {
			hint = " (an image's name is in lower case: " + lower + "?)"
		}
		return spec.Wrap(spec.CodeInvalidArgument, "dockerio.image", err, "image reference %q is not [REGISTRY/]NAME[:TAG][@DIGEST]%s", ref, hint)
	}
	return nil
}

// isHex: an image ID or a prefix of one without its sha256: (Docker takes
// both).
func isHex(s string) bool {
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return s != ""
}
