#!/usr/bin/env bash
# Regenerates the eBPF objects and their Go bindings (bpf2go, through the
# //go:generate lines under ebpf/: steer.c and fabric.c) and fails when the result differs from what
# is committed, so that CI catches a C change without regenerated objects.
# Needs clang, llvm-strip and libbpf-dev (Debian). Run from anywhere.
set -euo pipefail
cd "$(dirname "$0")/.."
go generate ./ebpf/...
if ! git diff --exit-code --stat -- ebpf/; then
  echo "ebpf/regen.sh: generated files differ from the committed ones; commit them" >&2
  exit 1
fi
untracked=$(git ls-files --others --exclude-standard -- ebpf/ | grep -E '_bpfe[lb]\.(go|o)$' || true)
if [ -n "$untracked" ]; then
  echo "ebpf/regen.sh: generated files not committed:" $untracked >&2
  exit 1
fi
