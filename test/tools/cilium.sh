#!/usr/bin/env bash
# Builds Cilium's agent and its CNI plugin, at the version the operator's policy types pin
# (go.mod's github.com/cilium/cilium), from the Go module proxy into a versioned cache
# outside the repository, once. Prints the directory holding `cilium-agent`, `cilium-cni`
# and `lib/bpf` (the datapath's C sources: the agent compiles them at start with clang,
# so --lib-dir points at `lib`).
#
# Cilium's go.mod replaces k8s.io/apimachinery with its own fork, which the proxy refuses
# (403): the build drops that replace and uses the upstream release the fork is based on.
#
# `cilium.sh --path` prints the directory if everything is built and fails otherwise,
# never building (tests use it to find the binaries, or skip).
set -euo pipefail

VERSION=v1.18.4
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=modfetch.sh
. "$here/modfetch.sh"
src=$(sha256sum <"$here/cilium.sh" | cut -c1-12)
dir=${COMPUTEPLANE_TESTBIN_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/computeplane/testbin}/cilium-${VERSION}-${src}
if [ -x "$dir/cilium-agent" ] && [ -x "$dir/cilium-cni" ] && [ -f "$dir/lib/bpf/bpf_lxc.c" ]; then
  echo "$dir"
  exit 0
fi
if [ "${1:-}" = --path ]; then
  echo "cilium $VERSION is not built: run $0" >&2
  exit 1
fi
echo "building cilium-agent $VERSION into $dir (first time only: ~10 min, ~3.5 GB of memory)" >&2
mkdir -p "$dir"
work="$dir/src"
main=$(moddir "github.com/cilium/cilium@$VERSION")
rm -rf "$work"
cp -r "$main" "$work" && chmod -R u+w "$work"
(cd "$work" && go mod edit -dropreplace k8s.io/apimachinery)
GOFLAGS=-mod=mod moddeps "$work"
ldflags="-s -w -X github.com/cilium/cilium/pkg/version.ciliumVersion=${VERSION#v}"
# Two compiles at a time: the agent's link alone peaks at ~3.4 GB.
(cd "$work" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -p 2 -trimpath -ldflags "$ldflags" -o "$dir/cilium-agent.tmp" ./daemon)
(cd "$work" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "$ldflags" -o "$dir/cilium-cni.tmp" ./plugins/cilium-cni)
rm -rf "${dir:?}/lib" && mkdir -p "$dir/lib" && cp -r "$work/bpf" "$dir/lib/bpf"
rm -rf "$work"
mv "$dir/cilium-cni.tmp" "$dir/cilium-cni"
mv "$dir/cilium-agent.tmp" "$dir/cilium-agent"
echo "$dir"
