#!/usr/bin/env bash
# Builds the pinned Kamaji manager from the Go module proxy into a versioned cache outside
# the repository, once. Prints the binary's path.
#
# Kamaji's go.mod replaces every k8s.io/* module with v0.30.2; replace directives apply only
# in the main module, so `go install ...@v1.0.0` is refused: the module is copied to a
# writable directory and built there as the main module (as its Dockerfile does).
# Cold: about 8 minutes on two cores; warm Go build cache: a link step.
#
# `kamaji.sh --path` prints the binary's path if it is built and fails otherwise, never
# building (tests use it to find the binary, or skip).
set -euo pipefail

VERSION=v1.0.0
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=modfetch.sh
. "$here/modfetch.sh"
src=$(cat "$here/kamaji.sh" | sha256sum | cut -c1-12)
dir=${COMPUTEPLANE_TESTBIN_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/computeplane/testbin}/kamaji-${VERSION}-${src}
bin="$dir/kamaji"
if [ -x "$bin" ]; then
  echo "$bin"
  exit 0
fi
if [ "${1:-}" = --path ]; then
  echo "kamaji $VERSION is not built: run $0" >&2
  exit 1
fi
echo "building kamaji $VERSION into $dir (first time only, ~8 min cold)" >&2
mkdir -p "$dir"
main=$(moddir "github.com/clastix/kamaji@$VERSION")
work="$dir/src"
rm -rf "$work"
cp -r "$main" "$work" && chmod -R u+w "$work"
# Stamped like its Dockerfile, so `kamaji` logs and telemetry name the real version.
pkg=github.com/clastix/kamaji/internal
ldflags="-s -w -X $pkg.GitRepo=https://github.com/clastix/kamaji -X $pkg.GitTag=$VERSION -X $pkg.GitDirty=false"
# Every module the build needs, fetched up front with retries (modfetch.sh).
GOFLAGS=-mod=mod moddeps "$work"
(cd "$work" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "$ldflags" -o "$bin.tmp" .)
rm -rf "$work"
mv "$bin.tmp" "$bin"
echo "$bin"
