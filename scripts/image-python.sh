#!/usr/bin/env bash
# Builds the realistic sandbox image stockade/python:dev (python3, coreutils,
# procps) from Debian's packages, no registry (scripts/image-debian.sh).
# Idempotent. Prints the image ID.
set -euo pipefail
exec "$(dirname "$0")/image-debian.sh" "${STOCKADE_PYTHON_IMAGE:-stockade/python:dev}" python3-minimal,coreutils,procps
