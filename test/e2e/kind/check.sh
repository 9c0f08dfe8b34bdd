#!/usr/bin/env bash
# The static check of the kind end-to-end path, for CI and `make kind-e2e-check`: it needs
# no Docker and no network. Every check runs; the exit status is non-zero if any failed.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../../.." && pwd)
failed=()

step() {
  local name=$1
  shift
  printf '== %s\n' "$name"
  if "$@"; then
    printf 'ok: %s\n' "$name"
  else
    printf 'FAIL: %s\n' "$name"
    failed+=("$name")
  fi
}

cd "$here"
for f in run.sh check.sh; do
  step "bash -n $f" bash -n "$f"
done
if command -v shellcheck >/dev/null; then
  # -x follows run.sh into versions.env.
  step "shellcheck run.sh check.sh" shellcheck -x run.sh check.sh
else
  printf 'notice: shellcheck is not installed (apt-get install shellcheck); skipping it\n'
fi
step "bash run.sh plan" bash -c 'bash run.sh plan >/dev/null'
cd "$root"
step "go vet ./test/e2e/kind/" go vet ./test/e2e/kind/

if ((${#failed[@]})); then
  printf 'kind-e2e-check: %d failed: %s\n' "${#failed[@]}" "${failed[*]}"
  exit 1
fi
printf 'kind-e2e-check: all passed\n'
