package warden

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// kill sends signal sig to process group pgid: exit 0 when sent, 3 when
// the group has no member (ESRCH), 1 on any other failure, 2 on bad
// arguments. Signal 0 probes.
func kill(sig, pgid string) int {
	s, err1 := strconv.Atoi(sig)
	g, err2 := strconv.Atoi(pgid)
	if err1 != nil || err2 != nil || s < 0 || s > 64 || g <= 1 {
		fmt.Fprintf(os.Stderr, "stockade-warden kill: signal %q (0..64) and process group %q (> 1) wanted\n", sig, pgid)
		return 2
	}
	if err := unix.Kill(-g, unix.Signal(s)); err != nil {
		fmt.Fprintf(os.Stderr, "stockade-warden kill: no such process group %d: %v\n", g, err)
		if errors.Is(err, unix.ESRCH) {
			return 3
		}
		return 1
	}
	return 0
}
