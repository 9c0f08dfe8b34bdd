#!/usr/bin/env bash
# Builds the pinned kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kubeadm,
# etcd and kubectl from the Go module proxy into a versioned cache outside the repository,
# once. Prints the directory holding them.
# The binaries never enter git: CI and developers rebuild them (a link step when the Go
# build cache is warm).
set -euo pipefail

K8S_VERSION=v1.36.3
ETCD_VERSION=v3.6.6
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=modfetch.sh
. "$here/modfetch.sh"
# The directory is keyed by the versions and by the sources of the tool modules built here
# (etcd/, k8s/; not the other Go code under test/tools), so a change to either rebuilds;
# everything else reuses the binaries.
modules=(etcd k8s)
src=$(cd "$here" && cat build.sh $(find "${modules[@]}" -name go.mod -o -name go.sum -o -name '*.go' | sort) | sha256sum | cut -c1-12)
dir=${COMPUTEPLANE_TESTBIN_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/computeplane/testbin/k8s-${K8S_VERSION}-etcd-${ETCD_VERSION}-${src}}
mkdir -p "$dir"

minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
# Unstamped builds report v0.0.0-master and break clients that check the server version.
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=${K8S_VERSION} -X $pkg.gitMajor=1 -X $pkg.gitMinor=${minor}"
  ldflags+=" -X $pkg.gitTreeState=clean"
done

fetched=
build() { # name module-dir package
  local name=$1 mod=$2 pkg=$3
  if [ -x "$dir/$name" ]; then return; fi
  echo "building $name into $dir (first time only)" >&2
  if [ -z "$fetched" ]; then
    (cd "$here" && moddeps "${modules[@]}")
    fetched=1
  fi
  (cd "$here/$mod" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$dir/$name.tmp" "$pkg")
  mv "$dir/$name.tmp" "$dir/$name"
}

build etcd etcd .
build kubectl k8s ./kubectl
build kube-apiserver k8s ./kube-apiserver
# A plane's controller-manager and scheduler, which the pod runner runs next to its
# kube-apiserver (internal/devenv/podrunner.go).
build kube-controller-manager k8s ./kube-controller-manager
build kube-scheduler k8s ./kube-scheduler
# A worker node's kubelet and the kubeadm its bootstrap data runs (internal/devenv/vm).
build kubelet k8s ./kubelet
build kubeadm k8s ./kubeadm
echo "$dir"
