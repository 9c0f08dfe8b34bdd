#!/usr/bin/env bash
# Builds Cluster API's core manager and its kubeadm bootstrap provider's manager, at the
# version the operator's API types pin, from the Go module proxy into a versioned cache
# outside the repository, once. Prints the directory holding `capi-manager` and
# `capi-kubeadm-bootstrap-manager`.
#
# The module's go.mod replaces its api module with ./api, which its zip lacks: modwork
# (modfetch.sh) puts the two together, as for the Flux helm-controller.
#
# `capi.sh --path` prints the directory if both are built and fails otherwise, never
# building (tests use it to find the binaries, or skip).
set -euo pipefail

VERSION=v1.14.2
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=modfetch.sh
. "$here/modfetch.sh"
src=$(sha256sum <"$here/capi.sh" | cut -c1-12)
dir=${COMPUTEPLANE_TESTBIN_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/computeplane/testbin}/cluster-api-${VERSION}-${src}
if [ -x "$dir/capi-manager" ] && [ -x "$dir/capi-kubeadm-bootstrap-manager" ]; then
  echo "$dir"
  exit 0
fi
if [ "${1:-}" = --path ]; then
  echo "cluster-api $VERSION is not built: run $0" >&2
  exit 1
fi
echo "building cluster-api $VERSION managers into $dir (first time only)" >&2
mkdir -p "$dir"
work="$dir/src"
modwork "sigs.k8s.io/cluster-api@$VERSION" "$work"
pkg=sigs.k8s.io/cluster-api/version
ldflags="-s -w -X $pkg.gitVersion=$VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=14 -X $pkg.gitTreeState=clean"
(cd "$work" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "$ldflags" -o "$dir/capi-manager.tmp" ./core)
(cd "$work" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "$ldflags" -o "$dir/capi-kubeadm-bootstrap-manager.tmp" ./bootstrap/kubeadm)
rm -rf "$work"
mv "$dir/capi-manager.tmp" "$dir/capi-manager"
mv "$dir/capi-kubeadm-bootstrap-manager.tmp" "$dir/capi-kubeadm-bootstrap-manager"
echo "$dir"
