#!/usr/bin/env bash
# Builds the sandbox image stockade/toolbox:dev from scratch, with no registry:
# a static busybox (Debian's busybox-static) with every applet linked, imported
# as a tar stream through the Engine API (docker import). No VOLUME, no ENV
# beyond PATH. Idempotent: an existing image whose recorded busybox digest
# matches is kept. Prints the image ID.
set -euo pipefail

tag=${STOCKADE_IMAGE:-stockade/toolbox:dev}
busybox=/bin/busybox

if ! dpkg -s busybox-static >/dev/null 2>&1; then
	echo "image: installing busybox-static (Debian package)" >&2
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq >/dev/null
	apt-get install -y -qq busybox-static >/dev/null
fi
# busybox-static installs /bin/busybox; make sure it is the static one.
linkage=$(ldd "$busybox" 2>&1 || true)
if [[ "$linkage" != *"not a dynamic executable"* ]]; then
	echo "image: $busybox is not statically linked; install busybox-static" >&2
	exit 1
fi

digest=$(sha256sum "$busybox" | cut -c1-64)
label="stockade.toolbox.busybox-sha256=$digest"
if id=$(docker image inspect --format '{{.Id}}' "$tag" 2>/dev/null); then
	have=$(docker image inspect --format '{{index .Config.Labels "stockade.toolbox.busybox-sha256"}}' "$tag")
	if [ "$have" = "$digest" ]; then
		echo "$id"
		exit 0
	fi
fi

root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
mkdir -p "$root"/{bin,etc,tmp,home/sandbox,workspace,proc,sys,dev}
chmod 1777 "$root/tmp"
cp "$busybox" "$root/bin/busybox"
# Link every applet (sh, sleep, setsid, kill, cat, id, ...) into /bin.
for applet in $("$busybox" --list); do
	[ "$applet" = busybox ] || ln -sf busybox "$root/bin/$applet"
done
printf 'root:x:0:0:root:/root:/bin/sh\nsandbox:x:65532:65532:sandbox:/home/sandbox:/bin/sh\n' >"$root/etc/passwd"
printf 'root:x:0:\nsandbox:x:65532:\n' >"$root/etc/group"

tar --numeric-owner --owner=0 --group=0 -C "$root" -cf - . |
	docker import \
		--change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
		--change "LABEL $label" \
		--change 'CMD ["/bin/sh"]' \
		- "$tag" >/dev/null
docker image inspect --format '{{.Id}}' "$tag"
