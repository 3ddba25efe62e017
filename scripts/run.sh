#!/usr/bin/env bash
# The main job: builds fuseops and runs `fuseops check` on every built-in case set (`fuseops list`), on the GPU when
# there is one, else on the CPU with reduced row counts. Arguments go to `fuseops check` (e.g. --set llama3-8b).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh >&2
exec "${FUSEOPS_BUILD_DIR:-build}/tools/fuseops/fuseops" check "$@"
