#!/usr/bin/env bash
# Put other projects' real CustomResourceDefinitions into .tools/crds/PROJECT/*.yaml: Cluster API and its AWS
# provider, the Prometheus Operator, Flux, Argo CD (tools/crds/modules.txt pins each module, version and hash).
# Tests install them beside ours (kubectl get clusters with Cluster API present; ServiceMonitor and
# PrometheusRule) and check that none of our resource names collides with theirs (doubles/thirdparty.py).
#
# Each comes from its Go module through the Go module proxy (`go mod download`, which checks the module against
# the checksum database); the module's hash must also equal the one pinned in modules.txt. Only the CRD files are
# read out of the module's zip, so a large module is never extracted. GOMODCACHE is "$HUBWRIGHT_CACHE/go/mod",
# as in scripts/tools.sh, and a project already extracted at its pinned version is left as it is. A project's
# folder is extracted into a temporary of this run's own and renamed into place (scripts/lib/cache.sh): two runs
# of one clone at once do not mix their files.
#
#   scripts/crds.sh            # called by scripts/tools.sh
#
# Exit status is non-zero, naming the module and the reason, when any pinned module cannot be fetched or
# holds no CRD where modules.txt says: nothing is skipped.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DEST="$ROOT/.tools/crds"
TABLE="$ROOT/tools/crds/modules.txt"
CACHE=${HUBWRIGHT_CACHE:-$HOME/.cache/hubwright}

export PATH="$PATH:/usr/local/go/bin"
export GOMODCACHE="$CACHE/go/mod"
export GOTOOLCHAIN=${GOTOOLCHAIN:-local}
unset GOFLAGS  # `go mod download module@version` runs outside any module

T0=$(date +%s)
say() { printf '[crds] %s\n' "$*"; }
die() { printf '[crds] ERROR: %s\n' "$*" >&2; exit 1; }
elapsed() { echo "$(( $(date +%s) - $1 ))s"; }
. "$ROOT/scripts/lib/cache.sh"  # cache_publish

[ -f "$TABLE" ] || die "no $TABLE"
command -v python3 >/dev/null || die "python3 is needed to read the CRD files out of the module zips"
mkdir -p "$DEST"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

projects=()
while read -r project module version sum files rest; do
    case "$project" in ''|'#'*) continue ;; esac
    [ -n "$files" ] && [ -z "$rest" ] || die "$TABLE: the line for '$project' needs PROJECT MODULE VERSION SUM FILES"
    projects+=("$project")
    t=$(date +%s)
    stamp="$module@$version $sum $files"
    if [ -f "$DEST/$project/.source" ] && [ "$(cat "$DEST/$project/.source")" = "$stamp" ]; then
        say "$project ($module@$version): cached, $(find "$DEST/$project" -name '*.yaml' | wc -l) files [$(elapsed "$t")]"
        continue
    fi
    command -v go >/dev/null || die "$project: no 'go' on PATH to fetch $module@$version (install Go, see scripts/go-version.sh)"
    # From an empty directory: outside any module. A module whose go directive is newer than this go still
    # downloads (its zip is what is read); the JSON then carries an Error besides the Zip, which is fine.
    json=$(cd "$work" && go mod download -json "$module@$version" 2>&1) || true
    zip=$(printf '%s\n' "$json" | sed -n 's/^[[:space:]]*"Zip": "\(.*\)",\{0,1\}$/\1/p')
    got=$(printf '%s\n' "$json" | sed -n 's/^[[:space:]]*"Sum": "\(.*\)",\{0,1\}$/\1/p')
    if [ -z "$zip" ] || [ ! -f "$zip" ]; then
        err=$(printf '%s\n' "$json" | sed -n 's/^[[:space:]]*"Error": "\(.*\)",\{0,1\}$/\1/p' | head -n 1)
        die "$project: cannot fetch $module@$version from the Go module proxy: ${err:-$(printf '%s\n' "$json" | tail -n 3 | paste -sd' ' -)}"
    fi
    [ "$got" = "$sum" ] || die "$project: $module@$version has hash '$got', but $TABLE pins '$sum'"
    rm -rf "$work/$project"
    python3 - "$zip" "$module@$version" "$files" "$work/$project" <<'EOF' || die "$project: see above"
import fnmatch, os, sys, zipfile
zip_path, prefix, globs, out = sys.argv[1], sys.argv[2] + "/", sys.argv[3].split(","), sys.argv[4]
os.makedirs(out)
taken = {}
with zipfile.ZipFile(zip_path) as zf:
    for member in zf.namelist():
        inner = member[len(prefix):] if member.startswith(prefix) else None
        if inner is None or not any(fnmatch.fnmatchcase(inner, g) for g in globs):
            continue
        name = os.path.basename(inner)
        if name in taken:
            sys.exit(f"two files named {name}: {taken[name]} and {inner}")
        taken[name] = inner
        with open(os.path.join(out, name), "wb") as f:
            f.write(zf.read(member))
missing = [g for g in globs if not any(fnmatch.fnmatchcase(i, g) for i in taken.values())]
if missing:
    sys.exit(f"no file in {prefix[:-1]} matches {', '.join(missing)}")
EOF
    printf '%s\n' "$stamp" >"$work/$project/.source"
    cache_publish "$work/$project" "$DEST/$project" || die "$project: cannot put its files at $DEST/$project"
    say "$project ($module@$version): $(find "$DEST/$project" -name '*.yaml' | wc -l) files [$(elapsed "$t")]"
done <"$TABLE"
[ ${#projects[@]} -gt 0 ] || die "$TABLE lists no module"
say "ready in $DEST: ${projects[*]} [total $(elapsed "$T0")]"
