#!/usr/bin/env bash
# Builds the pinned Flux helm-controller from the Go module proxy into a versioned cache
# outside the repository, once. Prints the binary's path.
#
# The module's go.mod replaces its api module with ./api, which the module zip does not
# contain, so `go install` is refused: the main module and the api module are downloaded
# separately and put together in a writable copy.
#
# `flux.sh --path` prints the binary's path if it is built and fails otherwise, never
# building (tests use it to find the binary, or skip).
set -euo pipefail

VERSION=v1.6.2
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=modfetch.sh
. "$here/modfetch.sh"
src=$(cat "$here/flux.sh" | sha256sum | cut -c1-12)
dir=${COMPUTEPLANE_TESTBIN_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/computeplane/testbin}/helm-controller-${VERSION}-${src}
bin="$dir/helm-controller"
if [ -x "$bin" ]; then
  echo "$bin"
  exit 0
fi
if [ "${1:-}" = --path ]; then
  echo "helm-controller $VERSION is not built: run $0" >&2
  exit 1
fi
echo "building helm-controller $VERSION into $dir (first time only)" >&2
mkdir -p "$dir"
work="$dir/src"
modwork "github.com/fluxcd/helm-controller@$VERSION" "$work"
(cd "$work" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "-s -w" -o "$bin.tmp" .)
rm -rf "$work"
mv "$bin.tmp" "$bin"
echo "$bin"
