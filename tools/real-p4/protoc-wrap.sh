#!/usr/bin/env bash
# protoc wrapper used by tools/real-p4/build.sh as p4c's Protobuf_PROTOC_EXECUTABLE.
# Runs the real protoc, then fixes the C++ headers it just wrote with
# pb_cstring_fix.py so that protobuf 3.21's generated setters accept p4c's
# `cstring` (see that file).  Everything else passes through unchanged.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
real=${NFC_REAL_PROTOC:-/usr/bin/protoc}
py=${NFC_PB_FIX_PYTHON:-/usr/bin/python3}
stamp=$(mktemp)
trap 'rm -f "$stamp"' EXIT
"$real" "$@"
outdirs=()
prev=
for a in "$@"; do
  case "$prev" in --cpp_out) outdirs+=("${a##*:}") ;; esac
  case "$a" in --cpp_out=*) v=${a#--cpp_out=}; outdirs+=("${v##*:}") ;; esac
  prev=$a
done
for d in "${outdirs[@]+"${outdirs[@]}"}"; do
  [[ -d "$d" ]] || continue
  find "$d" -name '*.pb.h' -newer "$stamp" -print0 | xargs -0 -r "$py" "$here/pb_cstring_fix.py"
done
