#!/usr/bin/env bash
# Generate other projects' CustomResourceDefinitions from their Go types into .tools/crds/PROJECT/*.yaml, for a
# project whose module holds the types and no CRD: Hive's ClusterDeployment, from github.com/openshift/hive/apis
# (tools/crds/generated.txt pins the module, its hash, the generator and its hash; scripts/crds.sh does the same
# for the projects that publish their CRDs). A schema for another project's kind is never written by hand.
#
# The generator, controller-gen, is built from its module through the Go module proxy (`go install`, checked
# against the checksum database and against the pinned hash) into "$HUBWRIGHT_CACHE/bin/controller-gen-VERSION",
# linked as .tools/bin/controller-gen. The types' module is fetched the same way, copied out of the read-only
# module cache, and generated from with its own go.mod and go.sum (-mod=readonly: a dependency whose hash is not
# in its go.sum fails). Of what controller-gen writes, only FILES are kept. A project already generated with its
# pinned line (the .source stamp) is left as it is, without running go: under a second. controller-gen is built
# under a lock on the cache, and it and a project's folder are renamed into place from temporaries of this run's
# own (scripts/lib/cache.sh): runs sharing the cache or the clone may run at once.
#
#   scripts/crds-gen.sh        # called by scripts/tools.sh after scripts/crds.sh
#
# Exit status is non-zero, naming the project and the reason, when a module cannot be fetched, has another hash
# than the pinned one, does not generate, or generates none of FILES: nothing is skipped.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DEST="$ROOT/.tools/crds"
BIN="$ROOT/.tools/bin"
TABLE="$ROOT/tools/crds/generated.txt"
CACHE=${HUBWRIGHT_CACHE:-$HOME/.cache/hubwright}

export PATH="$PATH:/usr/local/go/bin"
export GOMODCACHE="$CACHE/go/mod"
export GOCACHE="$CACHE/go/build"
export GOTOOLCHAIN=${GOTOOLCHAIN:-local}
export CGO_ENABLED=0
unset GOFLAGS  # set per command below

T0=$(date +%s)
say() { printf '[crds-gen] %s\n' "$*"; }
die() { printf '[crds-gen] ERROR: %s\n' "$*" >&2; exit 1; }
elapsed() { echo "$(( $(date +%s) - $1 ))s"; }
json_field() { sed -n "s/^[[:space:]]*\"$1\": \"\(.*\)\",\{0,1\}\$/\1/p"; }
. "$ROOT/scripts/lib/cache.sh"  # cache_build, cache_publish, place_file

[ -f "$TABLE" ] || die "no $TABLE"
mkdir -p "$DEST"
work=$(mktemp -d)
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT

# download WHAT MODULE@VERSION SUM: the module's directory in the module cache, once its hash is the pinned one.
download() {
    local what=$1 modver=$2 sum=$3 json dir got err
    command -v go >/dev/null || die "$what: no 'go' on PATH to fetch $modver (install Go, see scripts/go-version.sh)"
    json=$(cd "$work" && go mod download -json "$modver" 2>&1) || true
    dir=$(printf '%s\n' "$json" | json_field Dir)
    got=$(printf '%s\n' "$json" | json_field Sum)
    if [ -z "$dir" ] || [ ! -d "$dir" ]; then
        err=$(printf '%s\n' "$json" | json_field Error | head -n 1)
        die "$what: cannot fetch $modver from the Go module proxy: ${err:-$(printf '%s\n' "$json" | tail -n 3 | paste -sd' ' -)}"
    fi
    [ "$got" = "$sum" ] || die "$what: $modver has hash '$got', but $TABLE pins '$sum'"
    printf '%s\n' "$dir"
}

# controller_gen GENERATOR: the path of controller-gen at GENERATOR's version, built once into the cache, and
# linked as .tools/bin/controller-gen (download GENERATOR first: that checks its hash).
controller_gen() {
    local generator=$1 version=${1#*@} out log t
    [ "${generator%@*}" = sigs.k8s.io/controller-tools ] || die "$TABLE: the generator must be sigs.k8s.io/controller-tools@VERSION, not '$generator'"
    out="$CACHE/bin/controller-gen-$version" log="$CACHE/logs/controller-gen-$version.log"
    mkdir -p "$CACHE/bin" "$CACHE/logs" "$BIN"
    if [ ! -x "$out" ]; then
        t=$(date +%s)
        cache_build "$out" build_controller_gen "$version" "$log" || die "controller-gen $version: build failed (full log: $log)"
        if [ "$CACHE_BUILT" = 1 ]; then
            say "controller-gen $version: built [$(elapsed "$t")]" >&2
        else
            say "controller-gen $version: cached ($out), built by another run while this one waited [$(elapsed "$t")]" >&2
        fi
    fi
    [ "$BIN/controller-gen" -ef "$out" ] || place_file "$out" "$BIN/controller-gen"
    printf '%s\n' "$BIN/controller-gen"
}

# build_controller_gen VERSION LOG: controller_gen's build, run by cache_build under the cache's lock for the
# binary: into $CACHE_TMP, its output into LOG (written by the one run that builds).
build_controller_gen() {
    say "controller-gen $1: building (log: $2) ..." >&2
    if ! (cd "$work" && GOBIN="$work/gobin" GOFLAGS="-trimpath -buildvcs=false" \
            go install -ldflags="-s -w" "sigs.k8s.io/controller-tools/cmd/controller-gen@$1") >"$2" 2>&1; then
        tail -n 30 "$2" >&2
        return 1
    fi
    mv -f "$work/gobin/controller-gen" "$CACHE_TMP"
}

projects=()
while read -r project module version sum generator gensum packages files rest; do
    case "$project" in ''|'#'*) continue ;; esac
    [ -n "$files" ] && [ -z "$rest" ] || die "$TABLE: the line for '$project' needs PROJECT MODULE VERSION SUM GENERATOR GENSUM PACKAGES FILES"
    projects+=("$project")
    t=$(date +%s)
    stamp="$module@$version $sum $generator $gensum $packages $files"
    if [ -f "$DEST/$project/.source" ] && [ "$(cat "$DEST/$project/.source")" = "$stamp" ]; then
        [ -x "$CACHE/bin/controller-gen-${generator#*@}" ] && controller_gen "$generator" >/dev/null
        say "$project ($module@$version, ${generator#*/}): cached, $(find "$DEST/$project" -name '*.yaml' | wc -l) files [$(elapsed "$t")]"
        continue
    fi
    # The generator's hash is checked on every generation, also when its binary is already in the cache.
    download controller-gen "$generator" "$gensum" >/dev/null
    gen=$(controller_gen "$generator")
    dir=$(download "$project" "$module@$version" "$sum")
    # A writable copy (the module cache is read-only) without vendor/: its modules.txt alone would make go
    # default to -mod=vendor, and a module zip holds no vendored package.
    rm -rf "$work/src" "$work/out" "$work/$project"
    cp -R "$dir" "$work/src"
    chmod -R u+w "$work/src"
    rm -rf "$work/src/vendor"
    log="$work/$project.log"
    if ! (cd "$work/src" && GOFLAGS=-mod=readonly "$gen" crd paths="$packages" output:crd:dir="$work/out") >"$log" 2>&1; then
        tail -n 30 "$log" >&2
        die "$project: controller-gen crd paths=$packages failed in $module@$version"
    fi
    mkdir -p "$work/$project"
    IFS=, read -r -a globs <<<"$files"
    for g in "${globs[@]}"; do
        found=0
        for f in "$work"/out/$g; do
            [ -f "$f" ] || continue
            cp "$f" "$work/$project/"
            found=1
        done
        [ "$found" = 1 ] || die "$project: controller-gen wrote no file matching '$g' (it wrote: $(cd "$work/out" 2>/dev/null && ls | paste -sd' ' -))"
    done
    printf '%s\n' "$stamp" >"$work/$project/.source"
    cache_publish "$work/$project" "$DEST/$project" || die "$project: cannot put its files at $DEST/$project"
    say "$project ($module@$version, ${generator#*/}): generated $(find "$DEST/$project" -name '*.yaml' | wc -l) files [$(elapsed "$t")]"
done <"$TABLE"
[ ${#projects[@]} -gt 0 ] || die "$TABLE lists no project"
say "ready in $DEST: ${projects[*]} [total $(elapsed "$T0")]"
