#!/usr/bin/env bash
# Checks that the committed eBPF objects and their Go bindings match their C
# sources: runs the bpf2go commands of the //go:generate lines in ebpf/gen.go
# on a copy of the C sources in a temporary directory and compares every
# generated file with the committed one. It never writes into the tree, so a
# failed build leaves the committed objects in place; to update them after a
# C change, run `go generate ./ebpf/...` and commit the result.
# Needs clang, llvm-strip and libbpf-dev (Debian). Run from anywhere.
set -euo pipefail
cd "$(dirname "$0")/.."

tmp=$(mktemp -d "${TMPDIR:-/tmp}/spray-regen.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

go build -o "$tmp/bpf2go" github.com/cilium/ebpf/cmd/bpf2go
mkdir "$tmp/ebpf"
cp ebpf/*.c "$tmp/ebpf/"
if compgen -G 'ebpf/*.h' >/dev/null; then cp ebpf/*.h "$tmp/ebpf/"; fi

lines=$(sed -n 's#^//go:generate go tool bpf2go ##p' ebpf/gen.go)
if [ -z "$lines" ]; then
  echo "ebpf/regen.sh: no bpf2go //go:generate line in ebpf/gen.go" >&2
  exit 1
fi
while read -r args; do
  # The arguments hold no quotes or spaces inside words: split them as go
  # generate does.
  # shellcheck disable=SC2086
  (cd "$tmp/ebpf" && GOPACKAGE=ebpf GOFILE=gen.go "$tmp/bpf2go" $args)
done <<<"$lines"

bad=0
for f in "$tmp"/ebpf/*_bpfe[lb].go "$tmp"/ebpf/*_bpfe[lb].o; do
  [ -e "$f" ] || continue
  name=ebpf/$(basename "$f")
  if ! git ls-files --error-unmatch -- "$name" >/dev/null 2>&1; then
    echo "ebpf/regen.sh: $name is generated but not committed" >&2
    bad=1
  elif ! cmp -s "$f" "$name"; then
    echo "ebpf/regen.sh: $name differs from what its C source generates" >&2
    bad=1
  fi
done
for name in $(git ls-files -- 'ebpf/*_bpfe[lb].go' 'ebpf/*_bpfe[lb].o'); do
  if [ ! -e "$tmp/$name" ]; then
    echo "ebpf/regen.sh: $name is committed but no longer generated" >&2
    bad=1
  fi
done
if [ "$bad" -ne 0 ]; then
  echo "ebpf/regen.sh: run go generate ./ebpf/... and commit the result" >&2
  exit 1
fi
echo "ebpf/regen.sh: $(ls "$tmp"/ebpf/*_bpfe[lb].* | wc -l) generated files match the committed ones"
