// Package survivor holds the hostile workload the crash drill and the
// tests run beside a sandbox's checkpoints and rollbacks: processes that
// outlive the runtime's view of them (setsid, a double fork) and race what
// root does in the workspace. One script, so the drill and the tests attack
// alike.
package survivor

import "strings"

// Script is a shell script (sh -c) that leaves running, past its own
// exit: a setsid loop that swaps every directory of a rollback's staging
// directory for a link to / (the daemon extracts as root), forges the
// rollback's marker in work under every name it reads there (a directory
// and a file in it), and, should /workspace ever become the sandbox
// user's, replaces the warden with a program that records its uid in
// work/pwned; and a double-forked sleep. It prints "started".
const Script = `setsid sh -c '
while :; do
  for d in /workspace/.rollback-*; do
    [ -d "$d" ] || continue
    for p in "$d"/*/; do [ -L "${p%/}" ] || { mv "${p%/}" "${p%/}.old" && ln -s / "${p%/}"; } 2>/dev/null; done
    for m in "$d"/.stockade-rollback-*; do
      [ -e "$m" ] || continue
      n=${m##*/}; mkdir "/workspace/work/$n" 2>/dev/null; touch "/workspace/work/$n/x" 2>/dev/null
    done
  done
  if [ -w /workspace ]; then
    mv /workspace/.stockade /workspace/.taken 2>/dev/null; mkdir -p /workspace/.stockade
    printf "#!/bin/sh\nid > /workspace/work/pwned\n" > /workspace/.stockade/stockade-warden
    chmod 755 /workspace/.stockade/stockade-warden
  fi
done' </dev/null >/dev/null 2>&1 &
( ( sleep 1003 </dev/null >/dev/null 2>&1 & ) & )
echo started`

// Is reports whether a line of `ps -o args` (or of `ps -o user,args`)
// is one of Script's processes.
func Is(line string) bool {
	return strings.Contains(line, "rollback-") || strings.Contains(line, "sleep 1003")
}
