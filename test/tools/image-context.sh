#!/usr/bin/env bash
# Checks that the manager image builds, with no Docker engine (make image-context):
#  1. assembles the build context `docker build .` sends: the working tree minus what
#     .dockerignore excludes (Docker's rules for the pattern kinds it uses: literal paths,
#     anchored at the root; any other pattern fails here until this script learns it);
#  2. checks the context holds every file of every package of the module that
#     `go list -deps ./cmd/manager` names, and says which pattern excluded a missing one;
#  3. runs the Dockerfile's build stage on it (its WORKDIR, COPY and RUN steps, in order, in a
#     scratch root, with GOFLAGS=-mod=readonly and the golang image's CGO default), and checks
#     that what the final stage copies was built, static (CGO_ENABLED=0) and -trimpath.
# It models only the instructions the Dockerfile uses today and fails on any other.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"

fail() {
  printf 'image-context: FAIL: %s\n' "$*" >&2
  exit 1
}
say() { printf 'image-context: %s\n' "$*"; }

work=$(mktemp -d "${TMPDIR:-/tmp}/image-context.XXXXXX")
# The module cache Go writes is read-only; make it removable.
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
ctx=$work/context  # what Docker sends
stage=$work/root   # the build stage's filesystem: its absolute paths land here
mkdir -p "$ctx" "$stage"

# The environment of the build stage's RUN steps: the golang image builds for linux, with
# cgo on by default (it has gcc); the module graph must not change (-mod=readonly).
build_env=(GOOS=linux CGO_ENABLED=1 GOFLAGS=-mod=readonly GOWORK=off)

# --- 1. .dockerignore and the context --------------------------------------------------------
patterns=()
pattern_lines=()
if [ -f .dockerignore ]; then
  n=0
  while IFS= read -r line || [ -n "$line" ]; do
    n=$((n + 1))
    [[ $line == \#* ]] && continue # Docker: a comment only in the first column
    p=$(printf '%s' "$line" | sed -e 's/^[[:space:]]*//' -e 's/[[:space:]]*$//')
    [ -z "$p" ] && continue
    case $p in
      '!'* | *'*'* | *'?'* | *'['* | *']'* | *\\*)
        fail ".dockerignore:$n: '$p' is a wildcard, escape or ! exception; this check understands only literal paths (teach test/tools/image-context.sh Docker's rule for it first)"
        ;;
    esac
    # Docker cleans the pattern and drops a leading /: both anchor at the context's root.
    p=$(printf '%s' "$p" | sed -e 's#//*#/#g' -e 's#^/##' -e 's#/$##')
    case /$p/ in
      // | */./* | */../*) fail ".dockerignore:$n: '$line': only plain paths below the root are understood" ;;
    esac
    patterns+=("$p")
    pattern_lines+=("$n")
  done <.dockerignore
fi

# excluded_by REL: the .dockerignore pattern (and its line) that leaves REL out, if any.
excluded_by() {
  local i
  for ((i = 0; i < ${#patterns[@]}; i++)); do
    if [[ $1 == "${patterns[$i]}" || $1 == "${patterns[$i]}"/* ]]; then
      printf ".dockerignore:%s '%s'" "${pattern_lines[$i]}" "${patterns[$i]}"
      return 0
    fi
  done
  return 1
}

prune=()
for ((i = 0; i < ${#patterns[@]}; i++)); do
  prune+=(-path "./${patterns[$i]}" -prune -o) # literal: no wildcards got this far
done
# (The ${a[@]+...} forms keep bash 3.2, macOS's, from calling an empty array unbound.)
find . ${prune[@]+"${prune[@]}"} -print0 | tar --null --no-recursion -T - -cf - | tar -C "$ctx" -xf -
say "context: $(find "$ctx" ! -type d | wc -l | tr -d ' ') files, $(du -sh "$ctx" | cut -f1) (${#patterns[@]} .dockerignore patterns: ${patterns[*]+${patterns[*]}})"

# --- 2. every package the manager imports is in it ------------------------------------------
# shellcheck disable=SC2016 # $d is the template's variable
tmpl='{{if and .Module .Module.Main}}{{$d := .Dir}}{{.ImportPath}}'
for f in GoFiles CgoFiles CFiles HFiles SFiles SysoFiles EmbedFiles; do
  tmpl+="{{range .$f}} {{\$d}}/{{.}}{{end}}"
done
tmpl+='{{"\n"}}{{end}}'
deps=$(env GOOS=linux CGO_ENABLED=0 GOFLAGS=-mod=readonly GOWORK=off go list -deps -f "$tmpl" ./cmd/manager) ||
  fail "go list -deps ./cmd/manager failed in the repository (above): the manager does not build here either"
missing=()
npkgs=0
while read -r pkg files; do
  [ -z "$pkg" ] && continue
  npkgs=$((npkgs + 1))
  for f in $files; do
    rel=${f#"$root"/}
    [ "$rel" = "$f" ] && fail "$pkg lives outside the repository ($f): a replace directive the image cannot see"
    if [ ! -e "$ctx/$rel" ]; then
      why=$(excluded_by "$rel") || why="not in the working tree"
      missing+=("$pkg: $rel (left out by $why)")
    fi
  done
done <<<"$deps"
if ((${#missing[@]})); then
  printf 'image-context: the manager imports these packages, but the build context lacks their files:\n' >&2
  printf '  %s\n' "${missing[@]}" >&2
  fail "${#missing[@]} files of the manager's packages are not in the image's build context: fix .dockerignore"
fi
say "the context holds all $npkgs packages of the module that go list -deps ./cmd/manager names"

# --- 3. the Dockerfile's build stage, run on the context ------------------------------------
gomod_go=$(sed -n 's/^go \([0-9.]*\).*/\1/p' go.mod)
stage_n=0
build_name=
workdir=$stage
artifacts=()

copy_in() { # copy_in LINE SRC DEST MANY: one COPY source from the context into the stage
  local n=$1 src=$2 dest=$3 many=$4 why
  case $src in
    *'*'* | *'?'* | *'['*) fail "Dockerfile:$n: COPY $src: wildcards are not modelled" ;;
  esac
  src=${src#./}
  src=${src%/}
  [ -z "$src" ] && src=.
  if [ "$src" != . ] && [ ! -e "$ctx/$src" ]; then
    why=$(excluded_by "$src") || why="it is not in the working tree"
    fail "Dockerfile:$n: COPY $src: not in the build context ($why)"
  fi
  if [ "$src" = . ] || [ -d "$ctx/$src" ]; then
    mkdir -p "$dest"
    cp -a "$ctx/$src/." "$dest/"
  elif [[ $many == 1 || $dest == */ ]]; then
    mkdir -p "$dest"
    cp -a "$ctx/$src" "$dest/"
  else
    mkdir -p "$(dirname "$dest")"
    cp -a "$ctx/$src" "$dest"
  fi
}

version_ge() { # version_ge A B: A >= B, for dotted numbers
  local a b i
  IFS=. read -r -a a <<<"$1"
  IFS=. read -r -a b <<<"$2"
  for ((i = 0; i < ${#a[@]} || i < ${#b[@]}; i++)); do
    ((10#${a[$i]:-0} > 10#${b[$i]:-0})) && return 0
    ((10#${a[$i]:-0} < 10#${b[$i]:-0})) && return 1
  done
  return 0
}

abs_in_stage() { # the stage's path for a Dockerfile path
  if [[ $1 == /* ]]; then printf '%s%s' "$stage" "$1"; else printf '%s/%s' "$workdir" "$1"; fi
}

run_instruction() { # run_instruction LINE TEXT
  local n=$1 text=$2 instr args
  instr=$(printf '%s' "${text%% *}" | tr '[:lower:]' '[:upper:]')
  args=${text#* }
  case $instr in
    COPY | RUN) [[ $args == \[* ]] && fail "Dockerfile:$n: the JSON form of $instr is not modelled" ;;
  esac
  read -r -a words <<<"$args"
  case $stage_n:$instr in
    *:FROM)
      stage_n=$((stage_n + 1))
      if [ $stage_n = 1 ]; then
        [[ ${#words[@]} == 3 && $(printf '%s' "${words[1]}" | tr '[:lower:]' '[:upper:]') == AS ]] || fail "Dockerfile:$n: the build stage must be 'FROM golang:<version> AS <name>'"
        build_name=${words[2]}
        [[ ${words[0]} =~ ^golang:([0-9]+\.[0-9]+(\.[0-9]+)?) ]] ||
          fail "Dockerfile:$n: cannot read a Go version from ${words[0]}"
        local image_go=${BASH_REMATCH[1]} need=$gomod_go
        [ -n "${BASH_REMATCH[2]}" ] || need=$(printf '%s' "$gomod_go" | cut -d. -f1,2) # golang:1.26 is the newest 1.26.x
        if ! version_ge "$image_go" "$need"; then
          fail "Dockerfile:$n: go.mod needs go $gomod_go but the image builds with ${words[0]} (the golang image sets GOTOOLCHAIN=local: it will not fetch a newer Go)"
        fi
        say "stage $build_name: ${words[0]} (go.mod: go $gomod_go)"
      elif [ $stage_n = 2 ]; then
        say "final stage: ${words[0]}"
      else
        fail "Dockerfile:$n: a third stage is not modelled"
      fi
      ;;
    1:WORKDIR)
      [[ ${#words[@]} == 1 && ${words[0]} == /* ]] || fail "Dockerfile:$n: only WORKDIR <absolute path> is modelled"
      workdir=$stage${words[0]}
      mkdir -p "$workdir"
      ;;
    1:COPY)
      [[ ${words[0]} == --* ]] && fail "Dockerfile:$n: COPY ${words[0]} is not modelled in the build stage"
      ((${#words[@]} >= 2)) || fail "Dockerfile:$n: COPY needs a source and a destination"
      local dest many=0 i
      dest=$(abs_in_stage "${words[${#words[@]} - 1]}")
      ((${#words[@]} > 2)) && many=1
      for ((i = 0; i < ${#words[@]} - 1; i++)); do
        copy_in "$n" "${words[$i]}" "$dest" "$many"
      done
      say "COPY ${words[*]}"
      ;;
    1:RUN)
      # An absolute output path lands in the scratch root.
      local cmd=${args// -o \// -o $stage/}
      say "RUN $args"
      (cd "$workdir" && env "${build_env[@]}" sh -c "$cmd") ||
        fail "Dockerfile:$n: RUN $args failed in the image's build context (above)"
      ;;
    2:COPY)
      [[ ${words[0]} == "--from=$build_name" && ${#words[@]} == 3 ]] ||
        fail "Dockerfile:$n: only 'COPY --from=$build_name <file> <dest>' is modelled in the final stage"
      [[ ${words[1]} == /* ]] || fail "Dockerfile:$n: COPY --from: only absolute sources are modelled"
      [ -f "$stage${words[1]}" ] || fail "Dockerfile:$n: the final stage copies ${words[1]}, which the build stage did not make"
      artifacts+=("$stage${words[1]}")
      ;;
    2:USER | 2:ENTRYPOINT | 2:CMD | 2:LABEL | 2:EXPOSE) ;;
    *) fail "Dockerfile:$n: $instr in stage $stage_n is not modelled by this check (teach test/tools/image-context.sh)" ;;
  esac
}

n=0
start=0
text=
while IFS= read -r line || [ -n "$line" ]; do
  n=$((n + 1))
  [[ $line =~ ^[[:space:]]*(#|$) ]] && [ -z "$text" ] && continue
  [ -z "$text" ] && start=$n
  if [[ $line =~ \\[[:space:]]*$ ]]; then
    text+="${line%\\*} "
    continue
  fi
  text+=$line
  text=$(printf '%s' "$text" | sed -e 's/^[[:space:]]*//')
  run_instruction "$start" "$text"
  text=
done <Dockerfile
[ -z "$text" ] || fail "Dockerfile:$start: a continued line never ends"
((${#artifacts[@]})) || fail "Dockerfile: the final stage copies nothing from the build stage"

for bin in "${artifacts[@]}"; do
  info=$(go version -m "$bin") || fail "${bin#"$stage"}: not a Go binary"
  grep -q $'^\tpath\tgithub.com/cozystack/computeplane/cmd/manager$' <<<"$info" ||
    fail "${bin#"$stage"} is not the manager: $(head -2 <<<"$info" | tail -1)"
  grep -q $'^\tbuild\tCGO_ENABLED=0$' <<<"$info" ||
    fail "${bin#"$stage"} was built with cgo: distroless/static has no libc (CGO_ENABLED=0 in the Dockerfile's go build)"
  grep -q $'^\tbuild\t-trimpath=true$' <<<"$info" ||
    fail "${bin#"$stage"} was built without -trimpath"
  say "built ${bin#"$stage"} ($(du -h "$bin" | cut -f1), static, -trimpath) from the image's build context"
done
say "ok"
