#!/usr/bin/env bash
# Put Gitea at .tools/bin/gitea, the real forge the registry's Git repositories are tested against
# (tests/gitea.py starts it on loopback), and its static files (locales, templates) at .tools/share/gitea,
# which its STATIC_ROOT_PATH points at: without them it dies on missing locale files.
#
# Gitea is built from its Go module, like the other engines:
#   1. `go mod download` of code.gitea.io/gitea at the pinned version (below: the one place it is pinned);
#   2. a writable copy of the module folder (the module cache is read-only). Its go.mod has `replace`
#      lines, so `go install ...@version` refuses it; a build inside the copy honours them;
#   3. `CGO_ENABLED=1 go build -tags 'sqlite sqlite_unlock_notify'` (SQLite is the test forge's database),
#      about 220 s cold on 2 cores, downloads included.
# v1.27.x does not build here: three of its dependencies are refused by the Go module proxy (403).
#
#   scripts/gitea.sh                        # called by scripts/tools.sh
#   HUBWRIGHT_TOOLS_REBUILD=1 scripts/gitea.sh
#
# Runs sharing the cache may run at once: the build is done under a lock on the cache, and the binary and the
# static files are renamed into place (scripts/lib/cache.sh); a run that waited takes what the other built.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN="$ROOT/.tools/bin"
SHARE="$ROOT/.tools/share"
CACHE=${HUBWRIGHT_CACHE:-$HOME/.cache/hubwright}
REBUILD=${HUBWRIGHT_TOOLS_REBUILD:-0}
GITEA_VERSION=v1.26.0

export PATH="$PATH:/usr/local/go/bin"
export GOMODCACHE="$CACHE/go/mod"
export GOCACHE="$CACHE/go/build"
export GOFLAGS="-trimpath -buildvcs=false"
export GOTOOLCHAIN=${GOTOOLCHAIN:-local}

say() { printf '[tools] gitea: %s\n' "$*"; }
die() { printf '[tools] ERROR: gitea: %s\n' "$*" >&2; exit 1; }
. "$ROOT/scripts/progress.sh"  # ticking: how long the build has been going, on a terminal
. "$ROOT/scripts/lib/cache.sh"  # cache_lock, cache_publish, place_*: safe when runs share the cache or .tools
mkdir -p "$BIN" "$SHARE" "$CACHE/bin" "$CACHE/logs" "$CACHE/share"
T0=$(date +%s)
out="$CACHE/bin/gitea-$GITEA_VERSION" static="$CACHE/share/gitea-$GITEA_VERSION" log="$CACHE/logs/gitea-$GITEA_VERSION.log"

link() {
    place_file "$out" "$BIN/gitea"
    place_link "$static" "$SHARE/gitea"
    "$BIN/gitea" --version >/dev/null 2>&1 || die "$BIN/gitea does not run"
}
cached() { [ "$REBUILD" != 1 ] && [ -x "$out" ] && [ -d "$static/options/locale" ]; }

if cached; then
    link
    say "$GITEA_VERSION: cached ($out) [$(( $(date +%s) - T0 ))s]"
    exit 0
fi

command -v go >/dev/null || die "no 'go' toolchain on PATH; install Go >= 1.26"
command -v gcc >/dev/null || die "no gcc: the SQLite driver needs cgo (apt-get install build-essential)"
# One build at a time: the binary's lock on the cache guards the static files too (both come from one build).
cache_lock "$out" "gitea $GITEA_VERSION"
if cached; then
    link
    say "$GITEA_VERSION: cached ($out), built by another run while this one waited [$(( $(date +%s) - T0 ))s]"
    exit 0
fi
say "$GITEA_VERSION: downloading the module (log: $log) ..."
work=$(mktemp -d)
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
dir=$(cd "$work" && go mod download -json "code.gitea.io/gitea@$GITEA_VERSION" 2>>"$log" \
      | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p') || true
[ -n "$dir" ] && [ -f "$dir/go.mod" ] || { tail -n 20 "$log" >&2; die "go mod download code.gitea.io/gitea@$GITEA_VERSION failed (log: $log)"; }
cp -r "$dir" "$work/src"
chmod -R u+w "$work/src"
say "$GITEA_VERSION: building (cgo, tags sqlite sqlite_unlock_notify) ..."
if ! ticking "gitea $GITEA_VERSION" sh -c 'cd "$1" && CGO_ENABLED=1 go build -tags "sqlite sqlite_unlock_notify" -ldflags "-s -w -X main.Version=$3" -o "$2" .' _ \
        "$work/src" "$work/gitea" "${GITEA_VERSION#v}" >>"$log" 2>&1; then
    tail -n 30 "$log" >&2
    die "build failed (full log: $log)"
fi
# Only what a running Gitea reads from disk: locales and option files, and the templates (mails, API errors).
mkdir -p "$work/static"
cp -r "$work/src/options" "$work/src/templates" "$work/static/"
# The static files first: a run that sees the binary in the cache without the lock finds them there too.
cache_publish "$work/static" "$static" || die "cannot put the static files at $static"
cache_publish "$work/gitea" "$out" || die "cannot put the built gitea at $out"
cache_unlock "$out"
link
say "$GITEA_VERSION: built [$(( $(date +%s) - T0 ))s]"
