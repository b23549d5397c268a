#!/usr/bin/env bash
# Builds the benchmarks' developer image stockade/devtools:dev (git, the
# whole python3 standard library, coreutils, tar, grep) from Debian's
# packages, no registry (scripts/image-debian.sh): the real trees of the
# change-tracking benchmarks. Idempotent. Prints the image ID.
set -euo pipefail
exec "$(dirname "$0")/image-debian.sh" "${STOCKADE_DEVTOOLS_IMAGE:-stockade/devtools:dev}" python3,git,coreutils,procps,tar,grep
