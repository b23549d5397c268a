package hostile

import (
	"context"
	"strings"
	"testing"

	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/internal/survivor"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/test/testkit"
)

// TestHostileRollbackSurvivor (issue 30, defects 4 and 5): processes that
// outlive the runtime's view of them (survivor.Script: setsid, a double
// fork, planting links and markers) race a
// rollback through a served runtime. None survives it, /workspace and the
// warden's directory stay root's 0755, nothing of the workload runs as uid
// 0, the journal says rolled back and the workspace is the checkpoint's.
// Before the fix the survivors ran on past the rollback.
func TestHostileRollbackSurvivor(t *testing.T) {
	h := newHostile(t)
	h.attack(t, testkit.SmallPolicy(), func(ctx context.Context, sb host.Sandbox) {
		okOut(t, "the checkpoint's tree", shIn(ctx, sb, "mkdir -p p/workspace p/tmp && dd if=/dev/zero of=p/tmp/big bs=1M count=8 2>/dev/null && echo ck > state.txt && echo ok"), "ok\n")
		if _, err := sb.Checkpoint(ctx, "ck"); err != nil {
			t.Fatal(err)
		}
		okOut(t, "the change", shIn(ctx, sb, "echo changed > state.txt && echo ok"), "ok\n")
		okOut(t, "the survivors", shIn(ctx, sb, survivor.Script), "started\n")
		if r := shIn(ctx, sb, "ps -o args"); !survivor.Is(string(r.stdout)) {
			t.Fatalf("the survivors do not run: %s", r.stdout)
		}
		for i := range 3 {
			if err := sb.Rollback(ctx, "ck"); err != nil {
				t.Fatalf("rollback %d: %v", i, err)
			}
			r := shIn(ctx, sb, "cat state.txt; stat -c '%u %a' /workspace /workspace/.stockade; ls /workspace/work/pwned 2>&1; ps -o user,args")
			out := string(r.stdout)
			_, ps, _ := strings.Cut(out, "USER")
			switch {
			case r.err != nil || !strings.HasPrefix(out, "ck\n0 755\n0 755\n"):
				t.Fatalf("after rollback %d: %q %v", i, out, r.err)
			case !strings.Contains(out, "No such file"):
				t.Fatalf("after rollback %d the survivor's program ran: %q", i, out)
			case survivor.Is(ps):
				t.Fatalf("a survivor outlived rollback %d:\n%s", i, out)
			}
			for _, line := range strings.Split(ps, "\n")[1:] {
				if f := strings.Fields(line); len(f) > 1 && (f[0] == "root" || f[0] == "0") {
					t.Fatalf("a process of the workload runs as uid 0 after rollback %d: %q", i, line)
				}
			}
			// Started again for the next round.
			okOut(t, "the survivors", shIn(ctx, sb, survivor.Script), "started\n")
		}
		types := h.sandboxTypesOf(t, ctx, sb.ID())
		if n := testkit.Count(types, (lifecycle.RolledBack{}).Type()); n != 3 || testkit.Count(types, (lifecycle.RollbackAbandoned{}).Type()) != 0 {
			t.Fatalf("journal %v: want 3 rollbacks, none abandoned", types)
		}
	})
}
