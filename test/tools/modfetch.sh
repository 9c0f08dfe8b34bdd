# shellcheck shell=bash
# Sourced by the scripts in this directory: module fetches that retry.
#
# The Go module proxy sometimes answers 502 Bad Gateway on a first fetch of a module (the
# next try works), and a build that fetches lazily fails on it halfway: the scripts fetch
# what they need up front through these, then build from the module cache.

# retry CMD...: runs CMD up to $MODFETCH_TRIES (5) times, 2 s apart.
retry() {
  local try=1 max=${MODFETCH_TRIES:-5}
  until "$@"; do
    if ((try >= max)); then
      echo "failed $max times: $*" >&2
      return 1
    fi
    echo "failed ($try of $max), retrying in 2s: $*" >&2
    sleep 2
    try=$((try + 1))
  done
}

# moddir MODULE@VERSION: prints the module's directory in the module cache, downloading it
# outside any module (so no go.mod is touched).
moddir() {
  local tmp info
  tmp=$(mktemp -d)
  info=$(cd "$tmp" && GOFLAGS=-mod=mod retry go mod download -json "$1") || {
    rmdir "$tmp"
    return 1
  }
  rmdir "$tmp"
  info=$(sed -n 's/^\t"Dir": "\(.*\)",$/\1/p' <<<"$info")
  if [ -z "$info" ]; then
    echo "go mod download $1 named no directory" >&2
    return 1
  fi
  echo "$info"
}

# moddeps DIR...: downloads every module the go.mod in each DIR needs.
moddeps() {
  local d
  for d in "$@"; do
    (cd "$d" && retry go mod download)
  done
}

# modwork MODULE@VERSION WORK: a writable copy of the module in WORK, with its api
# submodule (MODULE/api@VERSION) copied into ./api: the module's go.mod replaces it with
# ./api, which its zip does not contain, so `go install` is refused. Its dependencies are
# fetched up front (moddeps).
modwork() {
  local mod=${1%@*} version=${1#*@} work=$2 main api
  main=$(moddir "$mod@$version")
  api=$(moddir "$mod/api@$version")
  rm -rf "$work"
  cp -r "$main" "$work" && chmod -R u+w "$work"
  rm -rf "$work/api" && cp -r "$api" "$work/api" && chmod -R u+w "$work/api"
  GOFLAGS=-mod=mod moddeps "$work"
}
