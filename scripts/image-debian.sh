#!/usr/bin/env bash
# Builds a realistic sandbox image without a registry: a Debian bookworm
# root file system with the given packages made by mmdebstrap from Debian's
# packages, imported through the Engine API (docker import). It has the
# sandbox user (65532), /workspace and /home/sandbox, no VOLUME and no ENV
# beyond PATH. Idempotent: an existing image whose recorded recipe matches
# is kept. Prints the image ID.
#
#	image-debian.sh TAG PACKAGES   (PACKAGES comma-separated)
set -euo pipefail

tag=$1
packages=$2
suite=bookworm

if ! command -v mmdebstrap >/dev/null; then
	echo "image-debian: installing mmdebstrap (Debian package)" >&2
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq >/dev/null
	apt-get install -y -qq mmdebstrap >/dev/null
fi

recipe=$(printf '%s\n' "$suite" "$packages" "essential" "v1" | sha256sum | cut -c1-64)
label="stockade.debian.recipe=$recipe"
if id=$(docker image inspect --format '{{.Id}}' "$tag" 2>/dev/null); then
	have=$(docker image inspect --format '{{index .Config.Labels "stockade.debian.recipe"}}' "$tag")
	if [ "$have" = "$recipe" ]; then
		echo "$id"
		exit 0
	fi
fi

out=$(mktemp --suffix=.tar)
trap 'rm -f "$out"' EXIT
mmdebstrap --quiet --variant=essential --include="$packages" \
	--customize-hook='echo "sandbox:x:65532:65532:sandbox:/home/sandbox:/bin/sh" >> "$1/etc/passwd"' \
	--customize-hook='echo "sandbox:x:65532:" >> "$1/etc/group"' \
	--customize-hook='mkdir -p "$1/workspace" "$1/home/sandbox" && chmod 1777 "$1/tmp"' \
	--customize-hook='rm -rf "$1/var/cache/apt/archives"/*.deb "$1/var/lib/apt/lists"/*' \
	"$suite" "$out" >&2

docker import \
	--change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
	--change "LABEL $label" \
	--change 'CMD ["/bin/sh"]' \
	"$out" "$tag" >/dev/null
docker image inspect --format '{{.Id}}' "$tag"
