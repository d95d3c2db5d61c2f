#!/usr/bin/env bash
# Is the `go` on PATH new enough to build the tools? It must be at least the newest `go` directive of
# tools/*/go.mod (the modules scripts/tools.sh builds). Debian bookworm's golang-go is 1.19: with it the builds
# would fail minutes in, deep in a dependency; this says so at once, with what is needed and how to get it.
#
#   scripts/go-version.sh        # exit 0 when `go version` >= the newest directive, else 1 with the reason
#
# Called by ./dev setup (scripts/setup.sh) before scripts/tools.sh, and by scripts/tools.sh before it builds
# anything. It honours GOTOOLCHAIN like the go command does (`go version` reports the toolchain it would run).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
die() { printf '[go-version] ERROR: %s\n' "$*" >&2; exit 1; }

# The newest `go X.Y[.Z]` directive of tools/*/go.mod, and the file that has it.
need="" need_file=""
for mod in "$ROOT"/tools/*/go.mod; do
    v=$(awk '$1 == "go" && $2 ~ /^[0-9]/ {print $2; exit}' "$mod")
    [ -n "$v" ] || continue
    if [ -z "$need" ] || [ "$(printf '%s\n%s\n' "$need" "$v" | sort -V | tail -n 1)" != "$need" ]; then
        need=$v need_file=${mod#"$ROOT"/}
    fi
done
[ -n "$need" ] || die "no 'go' directive in $ROOT/tools/*/go.mod"

how="install Go >= $need from https://go.dev/dl (unpack it into /usr/local/go; scripts/tools.sh puts /usr/local/go/bin on PATH)"
gobin=$(command -v go 2>/dev/null) || die "Go >= $need is needed to build the tools ($need_file says 'go $need') and there is no 'go' on PATH: $how"

out=$(go version 2>&1) || die "'$gobin version' failed: $out"
# "go version go1.19.8 linux/amd64"; a development build ("go version devel go1.27-abc ...") counts as its X.Y.
have=$(printf '%s\n' "$out" | grep -oE 'go[0-9]+\.[0-9]+(\.[0-9]+)?' | head -n 1 | sed 's/^go//')
[ -n "$have" ] || die "cannot read a Go version from '$gobin version': $out"

if [ "$(printf '%s\n%s\n' "$need" "$have" | sort -V | head -n 1)" != "$need" ]; then
    # GOTOOLCHAIN (the go command fetching a newer toolchain from the module proxy) exists from Go 1.21 on.
    if [ "$(printf '%s\n%s\n' 1.21 "$have" | sort -V | head -n 1)" = 1.21 ]; then
        how="$how, or set GOTOOLCHAIN=go$need so this go fetches that toolchain itself"
    else
        how="$how (this go predates GOTOOLCHAIN, which needs Go >= 1.21)"
    fi
    die "Go >= $need is needed to build the tools ($need_file says 'go $need'); found go$have at $gobin ('$out'): $how"
fi
printf '[go-version] go%s at %s: >= %s (%s)\n' "$have" "$gobin" "$need" "$need_file"
