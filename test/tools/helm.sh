#!/usr/bin/env bash
# Builds the pinned Helm CLI from the Go module proxy into a versioned cache outside the
# repository, once. Prints the binary's path. The demo renders the operator's chart with
# it, and the install test compares that rendering with config/default's.
set -euo pipefail

VERSION=v4.3.2
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=modfetch.sh
. "$here/modfetch.sh"
src=$(sha256sum <"$here/helm.sh" | cut -c1-12)
dir=${COMPUTEPLANE_TESTBIN_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/computeplane/testbin}/helm-${VERSION}-${src}
bin="$dir/helm"
if [ -x "$bin" ]; then
  echo "$bin"
  exit 0
fi
echo "building helm $VERSION into $dir (first time only)" >&2
mkdir -p "$dir"
# Every module the build needs, fetched up front with retries (modfetch.sh): `go install`
# below resolves them from Helm's go.mod, so its copy is downloaded and its modules with it.
mod=$(moddir "helm.sh/helm/v4@$VERSION")
work=$(mktemp -d)
cp -r "$mod/." "$work" && chmod -R u+w "$work"
GOFLAGS=-mod=mod moddeps "$work"
rm -rf "$work"
(cd "$(mktemp -d)" && CGO_ENABLED=0 GOFLAGS=-mod=mod GOBIN="$dir/tmp" \
  go install -trimpath -ldflags "-s -w" "helm.sh/helm/v4/cmd/helm@$VERSION")
mv "$dir/tmp/helm" "$bin" && rmdir "$dir/tmp"
echo "$bin"
