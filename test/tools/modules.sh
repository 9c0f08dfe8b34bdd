#!/usr/bin/env bash
# Downloads every module the main module needs (or those of the module directories given),
# with retries (see modfetch.sh), so that a build or test that would fetch them lazily
# does not fail on the module proxy's occasional 502. Once they are cached it reads only
# the module cache.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=modfetch.sh
. "$here/modfetch.sh"
if (($#)); then
  moddeps "$@"
else
  moddeps "$here/../.."
fi
