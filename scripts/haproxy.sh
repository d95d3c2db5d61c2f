#!/usr/bin/env bash
# Put an HAProxy >= 2.9 at .tools/bin/haproxy, for the shared-ingress end-to-end tests (custom-tlv needs
# fc_pp_tlv and set-proxy-v2-tlv-fmt, both new in 2.9; Debian bookworm ships 2.6).
#
# In order: an haproxy on PATH that is new enough; one built before, in "$HUBWRIGHT_CACHE/bin";
# else build the upstream source of Debian trixie's haproxy package:
#   1. a deb-src sources file for trixie, owned by this script in a temporary folder and removed on exit,
#      on the Debian mirror the machine's own apt sources name;
#   2. `apt-get update` into a private lists folder: apt checks the suite's InRelease signature against
#      Debian's archive keyring, and the Sources index against it;
#   3. the upstream tarball's SHA-256 from that signed index, and `apt-helper download-file` to fetch it and
#      refuse it on any other hash;
#   4. `make TARGET=linux-glibc` (no OpenSSL, Lua or PCRE: none are needed here; about 75 s on 2 cores).
# Only the upstream tarball is used, not Debian's patch set: it is the same file for every Debian revision
# of the version, so this works even where a mirror lacks the newest revision's .debian.tar.xz.
#
#   scripts/haproxy.sh                        # called by scripts/tools.sh
#   HUBWRIGHT_TOOLS_REBUILD=1 scripts/haproxy.sh
#
# Runs sharing the cache may run at once: the build (and its apt lists in the cache) is done under a lock on the
# cache, and the binary renamed into place (scripts/lib/cache.sh); a run that waited takes what the other built.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN="$ROOT/.tools/bin"
CACHE=${HUBWRIGHT_CACHE:-$HOME/.cache/hubwright}
REBUILD=${HUBWRIGHT_TOOLS_REBUILD:-0}
SUITE=trixie
NEED_MAJOR=2 NEED_MINOR=9

say() { printf '[tools] haproxy: %s\n' "$*"; }
. "$ROOT/scripts/progress.sh"  # ticking: how long the build has been going, on a terminal
. "$ROOT/scripts/lib/cache.sh"  # cache_lock, cache_publish, place_*: safe when runs share the cache or .tools
die() { printf '[tools] ERROR: haproxy: %s\n' "$*" >&2; exit 1; }
mkdir -p "$BIN" "$CACHE/bin" "$CACHE/logs"
T0=$(date +%s)

# version_of BINARY: "3.0.11" from `haproxy -v`.
version_of() { "$1" -v 2>/dev/null | sed -n '1s/^HAProxy version \([0-9][0-9.]*\).*/\1/p'; }
new_enough() {
    local v=$1 major minor
    major=${v%%.*}; minor=${v#*.}; minor=${minor%%.*}
    [ -n "$v" ] && { [ "$major" -gt "$NEED_MAJOR" ] || { [ "$major" -eq "$NEED_MAJOR" ] && [ "$minor" -ge "$NEED_MINOR" ]; }; }
}
place() { place_file "$1" "$BIN/haproxy"; }
# cached: the newest HAProxy built before into the cache, when it is new enough; else nothing.
cached() {
    local c
    c=$(ls -1 "$CACHE"/bin/haproxy-[0-9]* 2>/dev/null | sort -V | tail -n 1 || true)
    if [ -n "$c" ] && [ -x "$c" ] && new_enough "$(version_of "$c")"; then printf '%s\n' "$c"; fi
}

# 1. on PATH (not ours)
if [ "$REBUILD" != 1 ]; then
    p=$(PATH=$(printf '%s' "$PATH:/usr/sbin" | tr ':' '\n' | grep -vxF "$BIN" | paste -sd: -) command -v haproxy 2>/dev/null || true)
    if [ -n "$p" ] && new_enough "$(version_of "$p")"; then
        place_link "$p" "$BIN/haproxy"
        say "using $p ($(version_of "$p")) [$(( $(date +%s) - T0 ))s]"
        exit 0
    fi
    # 2. built before
    c=$(cached)
    if [ -n "$c" ]; then
        place "$c"
        say "$(version_of "$c"): cached ($c) [$(( $(date +%s) - T0 ))s]"
        exit 0
    fi
    [ -n "$p" ] && say "$p is $(version_of "$p"); custom-tlv needs >= $NEED_MAJOR.$NEED_MINOR: building $SUITE's"
fi

# 3. build Debian trixie's upstream source, one run at a time (the version is known only from the index, so the
# lock is on the build from $SUITE's source, not on one binary). A run that waited finds the other's binary.
cache_lock "$CACHE/bin/haproxy-$SUITE-source" "haproxy from $SUITE's source"
if [ "$REBUILD" != 1 ]; then
    c=$(cached)
    if [ -n "$c" ]; then
        place "$c"
        say "$(version_of "$c"): cached ($c), built by another run while this one waited [$(( $(date +%s) - T0 ))s]"
        exit 0
    fi
fi
command -v make >/dev/null && command -v gcc >/dev/null || die "needs make and gcc (apt-get install build-essential)"
[ -x /usr/lib/apt/apt-helper ] || die "needs apt (/usr/lib/apt/apt-helper): this build reads Debian's signed indexes"

# The Debian mirror this machine already uses: the first URI serving a main suite (not -security).
mirror_uri() {
    local f
    for f in /etc/apt/sources.list.d/*.sources; do
        [ -f "$f" ] || continue
        awk 'BEGIN{RS=""; FS="\n"} {uri=""; ok=0
             for (i=1;i<=NF;i++) { if ($i ~ /^URIs:/) { split($i, a, " "); uri=a[2] }
                                   if ($i ~ /^Suites:/ && $i !~ /-security/) ok=1 }
             if (ok && uri != "" && uri !~ /security/) { print uri; exit } }' "$f"
    done
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [ -f "$f" ] || continue
        awk '$1 ~ /^deb(-src)?$/ { u=$2; if ($2 ~ /^\[/) { for (i=2;i<=NF;i++) if ($i ~ /\]$/) { u=$(i+1); break } }
             if (u !~ /security/) { print u; exit } }' "$f"
    done
}
URI=$(mirror_uri | head -n 1)
[ -n "$URI" ] || die "no Debian mirror in /etc/apt/sources.list{,.d}: cannot reach Debian's package registry"

KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg
[ -f "$KEYRING" ] || die "no $KEYRING (package debian-archive-keyring): cannot check $SUITE's signature"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
SOURCES="$WORK/hubwright-$SUITE-src.sources"   # ours; removed with $WORK on exit
cat >"$SOURCES" <<EOF
Types: deb-src
URIs: $URI
Suites: $SUITE
Components: main
Signed-By: $KEYRING
EOF
LISTS="$CACHE/apt/$SUITE/lists"
mkdir -p "$LISTS/partial" "$WORK/apt-cache/archives/partial"
APT=(-o "Dir::Etc::SourceList=$SOURCES" -o "Dir::Etc::SourceParts=$WORK/none" -o "Dir::State::Lists=$LISTS"
     -o "Dir::Cache=$WORK/apt-cache" -o "APT::Sandbox::User=root" -q)
LOG="$CACHE/logs/haproxy-$SUITE.log"
say "reading $SUITE's signed source index from $URI (log: $LOG)"
apt-get "${APT[@]}" update >"$LOG" 2>&1 || { tail -n 20 "$LOG" >&2; die "apt-get update of $SUITE failed (signature or network)"; }
grep -q "^W: GPG error\|NO_PUBKEY\|not signed" "$LOG" && { tail -n 20 "$LOG" >&2; die "$SUITE's index is not signed by a key in $KEYRING"; }

record=$(apt-cache "${APT[@]}" showsrc --only-source haproxy 2>>"$LOG") || die "no haproxy source package in $SUITE"
dir=$(printf '%s\n' "$record" | sed -n 's/^Directory: //p' | head -n 1)
read -r sha size orig < <(printf '%s\n' "$record" | sed -n '/^Checksums-Sha256:/,/^[A-Za-z]/p' | grep -E '\.orig\.tar\.' | head -n 1)
[ -n "$dir" ] && [ -n "$orig" ] || die "cannot find haproxy's upstream tarball in $SUITE's Sources index"
VERSION=$(printf '%s' "$orig" | sed -n 's/^haproxy_\([0-9.]*\)\.orig\.tar\..*/\1/p')
new_enough "$VERSION" || die "$SUITE's haproxy is $VERSION, older than $NEED_MAJOR.$NEED_MINOR"

say "fetching $orig ($size bytes, SHA256 $sha from the signed index)"
/usr/lib/apt/apt-helper -o "APT::Sandbox::User=root" download-file "$URI/$dir/$orig" "$WORK/$orig" "SHA256:$sha" >>"$LOG" 2>&1 \
    || { tail -n 5 "$LOG" >&2; die "download of $orig failed or its hash differs from the signed index"; }
[ "$(sha256sum "$WORK/$orig" | cut -d' ' -f1)" = "$sha" ] || die "$orig: SHA-256 differs from the signed index"

say "building $VERSION (make TARGET=linux-glibc) ..."
t=$(date +%s)
tar -xf "$WORK/$orig" -C "$WORK"
src=$(find "$WORK" -maxdepth 1 -type d -name "haproxy-$VERSION*" | head -n 1)
[ -n "$src" ] || die "the tarball has no haproxy-$VERSION folder"
ticking "haproxy $VERSION" make -C "$src" -j"$(nproc)" TARGET=linux-glibc >>"$LOG" 2>&1 || { tail -n 30 "$LOG" >&2; die "build failed (log: $LOG)"; }
out="$CACHE/bin/haproxy-$VERSION"
# (not "$WORK/haproxy-$VERSION": that is the source folder the tarball unpacked, and install would copy into it)
install -m 0755 "$src/haproxy" "$WORK/haproxy.built"
cache_publish "$WORK/haproxy.built" "$out" || die "cannot put the built haproxy at $out"
cache_unlock "$CACHE/bin/haproxy-$SUITE-source"
new_enough "$(version_of "$out")" || die "the built $out does not run or reports $(version_of "$out")"
place "$out"
say "$VERSION: built in $(( $(date +%s) - t ))s [$(( $(date +%s) - T0 ))s in all]"
