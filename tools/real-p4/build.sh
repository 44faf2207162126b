#!/usr/bin/env bash
# Build the real P4 tools from source, outside the repository:
#   p4c:  p4test, p4c-bm2-ss (bmv2 back end), p4c-barefoot + bfas (Tofino back end)
#   bmv2: simple_switch (+ simple_switch_CLI)
# into $NFC_REAL_P4 (default $HOME/.cache/nfc-real-p4).  See README.md beside this file.
#
# Usage: tools/real-p4/build.sh [STEP...]
#   steps: deps sources configure p4c bmv2 tofino summary
#          prepare = deps sources configure   (no heavy compiles)
#          all     = every step, in order     (the default)
# Each step is skipped when its product already exists, so the script can be
# re-run after a failure or an interruption and goes on where it stopped.
# Remove a product (or a build folder) to redo its step.
#
# Sources come from local bare git mirrors (no network access is assumed):
# set NFC_REAL_P4_MIRRORS (default $NFC_REAL_P4/mirrors, laid out as <owner>+<name>/repo)
# or the *_MIRROR variables below.  The project never vendors p4c or bmv2 code:
# the few build fixes needed on Debian 12 are applied to the exported copy in
# $NFC_REAL_P4/src (see patch_p4c).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
NFC_REAL_P4=${NFC_REAL_P4:-$HOME/.cache/nfc-real-p4}
MIRRORS=${NFC_REAL_P4_MIRRORS:-$NFC_REAL_P4/mirrors}
P4C_MIRROR=${P4C_MIRROR:-$MIRRORS/p4lang+p4c/repo}
BMV2_MIRROR=${BMV2_MIRROR:-$MIRRORS/p4lang+behavioral-model/repo}
ABSEIL_MIRROR=${ABSEIL_MIRROR:-$MIRRORS/abseil+abseil-cpp/repo}
BDWGC_MIRROR=${BDWGC_MIRROR:-$MIRRORS/ivmai+bdwgc/repo}
P4RUNTIME_MIRROR=${P4RUNTIME_MIRROR:-$MIRRORS/p4lang+p4runtime/repo}
SPDLOG_MIRROR=${SPDLOG_MIRROR:-$MIRRORS/gabime+spdlog/repo}
# Revisions: p4c and bmv2 default to the releases the fixes were measured on
# (falling back to the mirror's HEAD); abseil, bdwgc, p4runtime and spdlog
# default to the revisions the exported p4c pins in its CMake files.
P4C_PREFERRED_TAG=${P4C_PREFERRED_TAG:-v1.2.5.16}
BMV2_PREFERRED_TAG=${BMV2_PREFERRED_TAG:-1.15.5}
P4C_REV=${P4C_REV:-}
BMV2_REV=${BMV2_REV:-}
ABSEIL_REV=${ABSEIL_REV:-}
BDWGC_REV=${BDWGC_REV:-}
P4RUNTIME_REV=${P4RUNTIME_REV:-}
SPDLOG_REV=${SPDLOG_REV:-}

JOBS=${JOBS:-2}
NICE=${NICE:-10}
P4C_OPT=${P4C_OPT:--O1}        # p4test, p4c-bm2-ss
TOFINO_OPT=${TOFINO_OPT:--O0}  # p4c-barefoot, bfas (-O0 compiles fastest; 20-30 s per program)
BMV2_OPT=${BMV2_OPT:--O1}
INSTALL_APT=${NFC_REAL_P4_APT:-1}  # 0: do not apt-get install missing packages

SRC=$NFC_REAL_P4/src
BUILD=$NFC_REAL_P4/build
LOGS=$NFC_REAL_P4/logs
HELPERS=$NFC_REAL_P4/helpers
VENV=$NFC_REAL_P4/venv
BMV2_PREFIX=$NFC_REAL_P4/install/bmv2
BIN=$NFC_REAL_P4/bin

APT_PACKAGES=(
  # toolchain
  build-essential cmake git pkg-config python3 python3-venv bison flex libfl-dev
  autoconf automake libtool libtool-bin
  # p4c
  libboost-dev libboost-iostreams-dev libboost-graph-dev libgmp-dev
  libprotobuf-dev libprotoc-dev protobuf-compiler
  # Tofino back end
  libz3-dev rapidjson-dev libspdlog-dev libfmt-dev
  # bmv2
  libboost-program-options-dev libboost-thread-dev libboost-system-dev libboost-filesystem-dev
  libjudy-dev libpcap-dev libnanomsg-dev libthrift-dev thrift-compiler libxxhash-dev
  libjsoncpp-dev libssl-dev libevent-dev libffi-dev libreadline-dev
)
# jsl, jsonschema: the Tofino back end's logging-header generator; pyyaml: its
# register-code generator (walle); thrift: simple_switch_CLI.
PY_PACKAGES=(jsl==0.2.4 jsonschema pyyaml thrift==0.16.0)
PY_MODULES="jsl, jsonschema, yaml, thrift"

log() { printf '[real-p4 %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
have_rev() { git --git-dir="$1" rev-parse -q --verify "$2^{commit}" >/dev/null 2>&1; }

# Run a heavy command niced, logging to $LOGS/$1.log, and time it.
heavy() {
  local name=$1; shift
  local t0=$SECONDS
  log "$name: $* (log: $LOGS/$name.log)"
  echo "=== $(date -Is) $*" >>"$LOGS/$name.log"
  if ! nice -n "$NICE" "$@" >>"$LOGS/$name.log" 2>&1; then
    tail -n 40 "$LOGS/$name.log" >&2
    die "$name failed after $((SECONDS - t0)) s; see $LOGS/$name.log"
  fi
  log "$name: done in $((SECONDS - t0)) s"
  echo "$name $((SECONDS - t0))s $(date -Is)" >>"$LOGS/times.txt"
}

# ------------------------------------------------------------------ deps
step_deps() {
  local missing=() p
  for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  if ((${#missing[@]})); then
    [[ "$INSTALL_APT" = 1 ]] || die "missing Debian packages: ${missing[*]}"
    log "deps: apt-get install ${missing[*]}"
    local sudo=
    [[ $(id -u) = 0 ]] || sudo=sudo
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y --no-install-recommends "${missing[@]}"
  else
    log "deps: Debian packages present"
  fi
  if [[ -x "$VENV/bin/python" ]] && "$VENV/bin/python" -c "import $PY_MODULES" 2>/dev/null; then
    log "deps: venv present ($VENV)"
  else
    log "deps: venv $VENV with ${PY_PACKAGES[*]}"
    [[ -x "$VENV/bin/python" ]] || /usr/bin/python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q "${PY_PACKAGES[@]}"
  fi
}

# ------------------------------------------------------------------ sources
# export_tree MIRROR REV DEST: a work tree of REV, made once (stamp file .nfc-export).
export_tree() {
  local mirror=$1 rev=$2 dest=$3 sha
  [[ -d "$mirror" ]] || die "no git mirror at $mirror (bring it here, or set the *_MIRROR variable)"
  sha=$(git --git-dir="$mirror" rev-parse "$rev^{commit}")
  if [[ -f "$dest/.nfc-export" ]]; then
    [[ "$(cat "$dest/.nfc-export")" == "$sha"* ]] ||
      log "sources: $dest was exported from $(cat "$dest/.nfc-export"), not $rev ($sha); keeping it (remove it to re-export)"
    return 0
  fi
  log "sources: $mirror $rev ($sha) -> $dest"
  rm -rf "$dest.part"
  mkdir -p "$dest.part"
  if ! git --git-dir="$mirror" archive --format=tar "$sha" 2>/dev/null | tar -x -C "$dest.part" 2>/dev/null; then
    # A snapshot mirror can lack some large blobs (p4c: a binary under docs/):
    # export the top-level entries one by one and leave out those that fail.
    log "sources: whole-tree archive failed; exporting top-level entries one by one"
    rm -rf "$dest.part"; mkdir -p "$dest.part"
    local e
    while IFS= read -r e; do
      if ! (git --git-dir="$mirror" archive --format=tar "$sha" -- "$e" 2>/dev/null | tar -x -C "$dest.part" 2>/dev/null); then
        log "sources: left out '$e' (not complete in the mirror)"
        rm -rf "$dest.part/${e:?}"
      fi
    done < <(git --git-dir="$mirror" ls-tree --name-only "$sha")
  fi
  echo "$sha $rev $mirror" >"$dest.part/.nfc-export"
  rm -rf "$dest"
  mv "$dest.part" "$dest"
}

# pick_rev MIRROR WANTED: WANTED if the mirror has it, else the mirror's HEAD (with a warning).
pick_rev() {
  if [[ -n "$2" ]] && have_rev "$1" "$2"; then echo "$2"; return; fi
  [[ -z "$2" ]] || log "sources: $2 is not in $1; using its HEAD"
  echo HEAD
}

install_helpers() {
  mkdir -p "$HELPERS/cmake/protobuf"
  local f
  for f in cmake/protobuf/ProtobufConfig.cmake cmake/protobuf/ProtobufConfigVersion.cmake \
           protoc-wrap.sh pb_cstring_fix.py; do
    cmp -s "$HERE/$f" "$HELPERS/$f" || cp "$HERE/$f" "$HELPERS/$f"
  done
  chmod +x "$HELPERS/protoc-wrap.sh" "$HELPERS/pb_cstring_fix.py"
}

# The minimal fixes p4c needs to build on Debian 12 (GCC 12, protobuf 3.21, Z3 4.8.12).
# Each one is idempotent.
patch_p4c() {
  local p=$SRC/p4c
  # 1. GCC 12 + unity build: std::erase_if passes const elements to the
  #    predicate, so ir/visitor.cpp's lambdas must take `const &`.
  if grep -q '\[this\](flow_join_points_t::value_type &el)' "$p/ir/visitor.cpp"; then
    log "patch: ir/visitor.cpp erase_if lambdas take const &"
    sed -i 's/\[this\](flow_join_points_t::value_type &el)/[this](const flow_join_points_t::value_type \&el)/g' \
      "$p/ir/visitor.cpp"
  fi
  # 2. Z3: p4c asks for >= 4.8.14 with USE_PREINSTALLED_Z3; Debian 12 has 4.8.12, which works.
  local zv
  zv=$(awk '/define Z3_(MAJOR|MINOR)_VERSION|define Z3_BUILD_NUMBER/ {printf "%s%s", sep, $3; sep="."}' \
       /usr/include/z3_version.h 2>/dev/null || true)
  if [[ -n "$zv" ]] && grep -q 'set(Z3_MIN_VERSION "' "$p/cmake/Z3.cmake"; then
    local want
    want=$(sed -n 's/.*set(Z3_MIN_VERSION "\([0-9.]*\)").*/\1/p' "$p/cmake/Z3.cmake")
    if [[ "$want" != "$zv" ]] && [[ "$(printf '%s\n%s\n' "$want" "$zv" | sort -V | head -1)" == "$zv" ]]; then
      log "patch: cmake/Z3.cmake minimum Z3 $want -> $zv (the system's)"
      sed -i "s/set(Z3_MIN_VERSION \"$want\")/set(Z3_MIN_VERSION \"$zv\")/" "$p/cmake/Z3.cmake"
    fi
  fi
  # 3. The Tofino back end clones spdlog into backends/tofino/third_party/spdlog
  #    at configure time: give it the pinned revision from a mirror, or else a
  #    stand-in over Debian's libspdlog-dev (then -DFMT_HEADER_ONLY is needed,
  #    which the tofino configure step passes anyway).
  local sp=$p/backends/tofino/third_party/spdlog
  if [[ ! -f "$sp/CMakeLists.txt" ]]; then
    local rev=${SPDLOG_REV:-$(sed -n 's/^ *GIT_TAG \([^ ]*\).*/\1/p' "$p/backends/tofino/cmake/spdlog.cmake" | head -1)}
    if [[ -d "$SPDLOG_MIRROR" ]]; then
      export_tree "$SPDLOG_MIRROR" "$(pick_rev "$SPDLOG_MIRROR" "$rev")" "$sp"
    else
      log "patch: no spdlog mirror; a stand-in over the system spdlog in $sp"
      mkdir -p "$sp/include"
      ln -sfn /usr/include/spdlog "$sp/include/spdlog"
      cat >"$sp/CMakeLists.txt" <<'EOF'
# Stand-in written by nfc tools/real-p4/build.sh: the system's header-only spdlog.
add_library(spdlog INTERFACE)
add_library(spdlog::spdlog ALIAS spdlog)
target_include_directories(spdlog INTERFACE ${CMAKE_CURRENT_SOURCE_DIR}/include)
target_compile_definitions(spdlog INTERFACE FMT_HEADER_ONLY)
EOF
    fi
  fi
  # 4. Protobuf 3.21 generated setters reject p4c's cstring: handled without
  #    touching p4c's sources, by the protoc wrapper (helpers/protoc-wrap.sh ->
  #    pb_cstring_fix.py) which fixes every generated .pb.h, including the
  #    Tofino back end's control-plane/barefoot/p4info.pb.h.
}

step_sources() {
  mkdir -p "$SRC" "$LOGS"
  install_helpers
  local rev
  rev=${P4C_REV:-$(pick_rev "$P4C_MIRROR" "$P4C_PREFERRED_TAG")}
  export_tree "$P4C_MIRROR" "$rev" "$SRC/p4c"
  local p=$SRC/p4c
  # The revisions p4c pins for its FetchContent dependencies.
  local abseil bdwgc p4rt
  abseil=${ABSEIL_REV:-$(sed -n 's/.*set(P4C_ABSEIL_VERSION "\([^"]*\)").*/\1/p' "$p/cmake/Abseil.cmake" | head -1)}
  bdwgc=${BDWGC_REV:-$(sed -n 's/^ *GIT_TAG \([0-9a-f]*\).*/\1/p' "$p/cmake/BDWGC.cmake" | head -1)}
  p4rt=${P4RUNTIME_REV:-$(awk '/FetchContent_Declare\(/ {d=0} /p4runtime.git/ {d=1} d && /GIT_TAG/ {print $2; exit}' "$p/CMakeLists.txt")}
  export_tree "$ABSEIL_MIRROR" "$(pick_rev "$ABSEIL_MIRROR" "$abseil")" "$SRC/abseil-cpp"
  export_tree "$BDWGC_MIRROR" "$(pick_rev "$BDWGC_MIRROR" "$bdwgc")" "$SRC/bdwgc"
  export_tree "$P4RUNTIME_MIRROR" "$(pick_rev "$P4RUNTIME_MIRROR" "$p4rt")" "$SRC/p4runtime"
  patch_p4c
  rev=${BMV2_REV:-$(pick_rev "$BMV2_MIRROR" "$BMV2_PREFERRED_TAG")}
  export_tree "$BMV2_MIRROR" "$rev" "$SRC/behavioral-model"
}

# ------------------------------------------------------------------ configure
# CMake arguments both p4c build trees share.
p4c_common_args() {
  P4C_COMMON_ARGS=(
    -DCMAKE_BUILD_TYPE=Release
    -DCMAKE_UNITY_BUILD=ON
    -DFETCHCONTENT_FULLY_DISCONNECTED=ON
    "-DFETCHCONTENT_SOURCE_DIR_ABSEIL=$SRC/abseil-cpp"
    "-DFETCHCONTENT_SOURCE_DIR_BDWGC=$SRC/bdwgc"
    "-DFETCHCONTENT_SOURCE_DIR_P4RUNTIME=$SRC/p4runtime"
    -DP4C_USE_PREINSTALLED_PROTOBUF=ON -DENABLE_PROTOBUF_STATIC=OFF
    "-DProtobuf_DIR=$HELPERS/cmake/protobuf"
    "-DProtobuf_PROTOC_EXECUTABLE=$HELPERS/protoc-wrap.sh"
    "-DPYTHON_EXECUTABLE=$VENV/bin/python"
    -DENABLE_GTESTS=OFF -DENABLE_EBPF=OFF -DENABLE_UBPF=OFF -DENABLE_DPDK=OFF
    -DENABLE_P4TC=OFF -DENABLE_P4FMT=OFF -DENABLE_P4C_GRAPHS=OFF -DENABLE_TEST_TOOLS=OFF
    -DENABLE_DOCS=OFF
  )
}

configure_p4c_tree() {
  local name=$1; shift
  local dir=$BUILD/$name
  if [[ -f "$dir/Makefile" ]]; then
    log "configure: $dir already configured"
    return
  fi
  mkdir -p "$dir" "$LOGS"
  log "configure: $name (log: $LOGS/configure-$name.log)"
  if ! (cd "$dir" && PATH="$VENV/bin:$PATH" cmake "$SRC/p4c" "$@" >"$LOGS/configure-$name.log" 2>&1); then
    tail -n 30 "$LOGS/configure-$name.log" >&2
    rm -f "$dir/Makefile"
    die "cmake configure of $name failed; see $LOGS/configure-$name.log"
  fi
}

configure_bmv2() {
  local s=$SRC/behavioral-model
  if [[ -f "$s/Makefile" ]]; then
    log "configure: bmv2 already configured"
    return
  fi
  log "configure: bmv2 (log: $LOGS/configure-bmv2.log)"
  # Do not pass --without-pi: bmv2's configure turns PI on for either form.
  # --disable-static: libtool would otherwise compile every file twice.
  if ! (cd "$s" && ./autogen.sh && PATH="$VENV/bin:$PATH" ./configure --prefix="$BMV2_PREFIX" --disable-static \
          PYTHON="$VENV/bin/python" CXXFLAGS="$BMV2_OPT -g0" CFLAGS="$BMV2_OPT -g0") \
        >"$LOGS/configure-bmv2.log" 2>&1; then
    tail -n 30 "$LOGS/configure-bmv2.log" >&2
    rm -f "$s/Makefile"
    die "bmv2 configure failed; see $LOGS/configure-bmv2.log"
  fi
}

step_configure() {
  mkdir -p "$BUILD" "$LOGS"
  install_helpers
  p4c_common_args
  configure_p4c_tree p4c \
    "-DCMAKE_CXX_FLAGS_RELEASE=$P4C_OPT -DNDEBUG" "-DCMAKE_C_FLAGS_RELEASE=$P4C_OPT -DNDEBUG" \
    "${P4C_COMMON_ARGS[@]}" -DENABLE_BMV2=ON -DENABLE_P4TEST=ON -DENABLE_TOFINO=OFF
  configure_p4c_tree p4c-tofino \
    "-DCMAKE_CXX_FLAGS_RELEASE=$TOFINO_OPT" "-DCMAKE_C_FLAGS_RELEASE=$TOFINO_OPT" \
    "-DCMAKE_CXX_FLAGS=-DFMT_HEADER_ONLY" \
    "${P4C_COMMON_ARGS[@]}" -DENABLE_BMV2=OFF -DENABLE_P4TEST=OFF -DENABLE_TOFINO=ON -DUSE_PREINSTALLED_Z3=ON
  configure_bmv2
}

# ------------------------------------------------------------------ heavy builds
# Re-apply pb_cstring_fix.py to headers protoc already wrote in a build tree
# (idempotent; matters when the fixer changed after they were generated).
refix_pb_headers() {
  [[ -d "$1" ]] || return 0
  find "$1" -name '*.pb.h' -not -path '*/_deps/*' -print0 | xargs -0 -r /usr/bin/python3 "$HELPERS/pb_cstring_fix.py"
}

find_product() { find "$1" -name "$2" -type f -perm -u+x -not -path '*/CMakeFiles/*' 2>/dev/null | head -1; }

# make TARGETS... in p4c build tree $2 (log name $1), unless every target is built already
make_p4c_tree() {
  local name=$1 d=$2 t missing=0
  shift 2
  for t in "$@"; do [[ -n "$(find_product "$d" "$t")" ]] || missing=1; done
  if [[ $missing == 0 ]]; then
    log "$name: $* already built"
    return
  fi
  [[ -f "$d/Makefile" ]] || step_configure
  install_helpers
  refix_pb_headers "$d"
  heavy "$name" env PATH="$VENV/bin:$PATH" make -C "$d" -j"$JOBS" "$@"
}

step_p4c() { make_p4c_tree p4c "$BUILD/p4c" p4test p4c-bm2-ss; }

BMV2_SUBDIRS=(thrift_src third_party proto src include targets/simple_switch tools)

step_bmv2() {
  local s=$SRC/behavioral-model
  if [[ -x "$BMV2_PREFIX/bin/simple_switch" ]]; then
    log "bmv2: simple_switch already installed"
    return
  fi
  [[ -f "$s/Makefile" ]] || configure_bmv2
  # Only what simple_switch needs (not psa_switch, pna_nic, simple_router, l2_switch).
  local d
  for d in "${BMV2_SUBDIRS[@]}"; do
    [[ -f "$s/$d/Makefile" ]] || continue
    heavy "bmv2-${d//\//-}" env PATH="$VENV/bin:$PATH" make -C "$s/$d" -j"$JOBS"
  done
  for d in "${BMV2_SUBDIRS[@]}"; do
    [[ -f "$s/$d/Makefile" ]] || continue
    make -C "$s/$d" install >>"$LOGS/bmv2-install.log" 2>&1 || die "bmv2 install in $d failed; see $LOGS/bmv2-install.log"
  done
}

step_tofino() { make_p4c_tree tofino "$BUILD/p4c-tofino" p4c-barefoot bfas; }

# ------------------------------------------------------------------ summary
# Small wrappers in $BIN, so that putting $BIN on PATH is all a user needs.
write_wrapper() {
  local name=$1 target=$2
  [[ -n "$target" && -x "$target" ]] || { rm -f "$BIN/$name"; return; }
  cat >"$BIN/$name" <<EOF
#!/bin/sh
# written by nfc tools/real-p4/build.sh
: "\${P4C_16_INCLUDE_PATH:=$SRC/p4c/p4include}"
export P4C_16_INCLUDE_PATH
exec "$target" "\$@"
EOF
  chmod +x "$BIN/$name"
}

step_summary() {
  mkdir -p "$BIN"
  local p4test bm2 barefoot bfas ss sscli
  p4test=$(find_product "$BUILD/p4c" p4test)
  bm2=$(find_product "$BUILD/p4c" p4c-bm2-ss)
  barefoot=$(find_product "$BUILD/p4c-tofino" p4c-barefoot)
  bfas=$(find_product "$BUILD/p4c-tofino" bfas)
  ss=$BMV2_PREFIX/bin/simple_switch
  sscli=$BMV2_PREFIX/bin/simple_switch_CLI
  write_wrapper p4test "$p4test"
  write_wrapper p4c-bm2-ss "$bm2"
  write_wrapper p4c-barefoot "$barefoot"
  write_wrapper bfas "$bfas"
  [[ -x "$ss" ]] && ln -sfn "$ss" "$BIN/simple_switch"
  if [[ -x "$sscli" ]]; then
    cat >"$BIN/simple_switch_CLI" <<EOF
#!/bin/sh
# written by nfc tools/real-p4/build.sh: simple_switch_CLI needs the Python thrift package of $VENV
PYTHONPATH="$(ls -d "$BMV2_PREFIX"/lib/python3*/site-packages 2>/dev/null | head -1)\${PYTHONPATH:+:\$PYTHONPATH}" \\
  exec "$VENV/bin/python" "$sscli" "\$@"
EOF
    chmod +x "$BIN/simple_switch_CLI"
  fi
  cat >"$NFC_REAL_P4/env.sh" <<EOF
# written by nfc tools/real-p4/build.sh; source it to use the real P4 tools
export NFC_REAL_P4="$NFC_REAL_P4"
export PATH="$BIN:\$PATH"
export P4C_16_INCLUDE_PATH="$SRC/p4c/p4include"
export TNA_P4INCLUDE="$SRC/p4c/backends/tofino/bf-p4c/p4include"
export LD_LIBRARY_PATH="$BMV2_PREFIX/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
EOF
  local t
  echo
  echo "Real P4 tools in $NFC_REAL_P4:"
  for t in "p4test:$p4test" "p4c-bm2-ss:$bm2" "p4c-barefoot:$barefoot" "bfas:$bfas" \
           "simple_switch:$ss" "simple_switch_CLI:$sscli"; do
    if [[ -n "${t#*:}" && -x "${t#*:}" ]]; then
      printf '  %-18s %s\n' "${t%%:*}" "${t#*:}"
    else
      printf '  %-18s (not built)\n' "${t%%:*}"
    fi
  done
  printf '  %-18s %s\n' "p4include" "$SRC/p4c/p4include" "TNA p4include" "$SRC/p4c/backends/tofino/bf-p4c/p4include"
  echo
  echo "Set (or: source $NFC_REAL_P4/env.sh):"
  sed -n 's/^export /  export /p' "$NFC_REAL_P4/env.sh"
  echo
  echo "Examples:"
  echo "  p4test --std p4-16 -D__TARGET_TOFINO__=1 -I \"\$TNA_P4INCLUDE\" prog_tna.p4"
  echo "  p4c-bm2-ss prog_v1model.p4 -o prog.json && simple_switch --help"
  echo "  p4c-barefoot --target tofino --arch tna -I \"\$TNA_P4INCLUDE\" -I \"\$P4C_16_INCLUDE_PATH\" -o out prog_tna.p4"
}

# ------------------------------------------------------------------ main
main() {
  local steps=("$@")
  ((${#steps[@]})) || steps=(all)
  mkdir -p "$NFC_REAL_P4" "$LOGS"
  local s
  for s in "${steps[@]}"; do
    case $s in
      all) step_deps; step_sources; step_configure; step_p4c; step_bmv2; step_tofino; step_summary ;;
      prepare) step_deps; step_sources; step_configure ;;
      deps | sources | configure | p4c | bmv2 | tofino | summary) "step_$s" ;;
      -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
      *) die "unknown step '$s' (deps sources configure p4c bmv2 tofino summary prepare all)" ;;
    esac
  done
}

main "$@"
