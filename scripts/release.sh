#!/usr/bin/env bash
# A release, every artifact into one folder with a checksum file over all of them (`make release` runs this):
#
#   bash scripts/release.sh [--version V] [--dist DIR] [--aws-plugin PATH_OR_URL --aws-plugin-sha256 SUM]
#
#   hubwright-<V>.oci.tar            the image as an OCI archive (scripts/image.sh; without the AWS provider plugin:
#                                    hubwright-<V>-noplugin.oci.tar, tagged and labelled so)
#   hubwright-<V>[-noplugin].spdx.json  the image's SBOM (syft, SPDX JSON)
#   hubwright-<V>.tgz                the Helm chart (deploy/helm/hubwright, checked to be what the renderer generates)
#   install.yaml                     the install at the defaults in one file, for `kubectl apply -f` (kustomize's order)
#   hubwright-kustomize-<V>.tar.gz   the same as a kustomize base (install --render), to overlay
#   hubwright-<V>.pyz                the CLI as one file (scripts/zipapp.sh)
#   iam/*.json                       the IAM roles as CloudFormation templates, unscoped and scoped (iam --cloudformation)
#   SHA256SUMS                       sha256sum of every file above, paths relative to DIR (`sha256sum -c SHA256SUMS`)
#
# V is pyproject.toml's version (stacks.release.version(), the one place it is written): --version must equal it or
# nothing is built. DIR (default dist) is emptied first. Timestamps come from SOURCE_DATE_EPOCH (default: the last
# commit's time). Needs what ./dev setup installs (the venv; .tools/bin's pulumi, helm, syft, kubectl; root, podman,
# runc and mmdebstrap for the image). Prints each step's time and the total.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
PY=${PYTHON:-$ROOT/.venv/bin/python}
BIN=$ROOT/.tools/bin
say() { printf '[release] %s\n' "$*" >&2; }
die() { printf '[release] ERROR: %s\n' "$*" >&2; exit 1; }

want="" dist=dist plugin=() 
while [ $# -gt 0 ]; do
    case "$1" in
        --version) want=${2:?--version needs a version}; shift 2 ;;
        --dist) dist=${2:?--dist needs a folder}; shift 2 ;;
        --aws-plugin|--aws-plugin-sha256) plugin+=("$1" "${2:?$1 needs a value}"); shift 2 ;;
        -h|--help) sed -n '2,/^set /{/^set /d;s/^# \{0,1\}//;p}' "$0" >&2; exit 0 ;;
        *) die "unknown argument $1 (see --help)" ;;
    esac
done

bash scripts/venv.sh --check >/dev/null 2>&1 || bash scripts/venv.sh >&2
version=$("$PY" -c 'from stacks.release import version; print(version())')
[ -z "$want" ] || [ "$want" = "$version" ] || die "VERSION=$want is not this code's version $version (pyproject.toml's project.version, the one place it is written): change it there"
for tool in helm syft kubectl pulumi; do
    [ -x "$BIN/$tool" ] || die "$BIN/$tool not found: ./dev setup (scripts/tools.sh) builds it"
done
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}
export PATH="$BIN:$PATH"

T0=$(date +%s)
step() {  # step NAME COMMAND...: run it, say how long it took
    local name=$1 t; shift
    t=$(date +%s)
    "$@"
    say "$name: $(( $(date +%s) - t ))s"
}

rm -rf "$dist"
mkdir -p "$dist"
dist=$(cd "$dist" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/hubwright-release.XXXXXX")
trap 'rm -rf "$work"' EXIT

# A deterministic tarball of DIR's content under the name PREFIX/ (sorted, owned by 0, mtime SOURCE_DATE_EPOCH).
tarball() {
    tar --sort=name --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner \
        --transform "s|^\\.|$2|" -C "$1" -cf - . | gzip -n >"$3"
}

manifests() {
    "$PY" -m automation install --render "$work/base" >/dev/null
    tarball "$work/base" "hubwright-kustomize-$version" "$dist/hubwright-kustomize-$version.tar.gz"
    { echo "# hubwright $version: the install at its defaults (docs/install.md); kubectl apply --server-side -f install.yaml"
      kubectl kustomize "$work/base"; } >"$dist/install.yaml"
}

chart() {
    # The committed chart is packaged only if it is what the renderer generates now (tests/test_chart.py says the same).
    "$PY" -m automation install --chart deploy/helm/hubwright --check || die "the committed chart is stale (above)"
    helm lint --strict deploy/helm/hubwright >/dev/null
    helm package deploy/helm/hubwright --destination "$dist" >/dev/null
    [ -f "$dist/hubwright-$version.tgz" ] || die "helm package wrote no hubwright-$version.tgz (Chart.yaml's version?)"
}

image() {
    local name=hubwright-$version
    [ ${#plugin[@]} -gt 0 ] || name=$name-noplugin
    bash scripts/image.sh --out "$dist/$name.oci.tar" "${plugin[@]}"
    syft scan "oci-archive:$dist/$name.oci.tar" --quiet --output "spdx-json=$dist/$name.spdx.json"
}

step "kustomize base and install.yaml" manifests
step "Helm chart" chart
step "IAM templates" "$PY" -m automation iam --cloudformation "$dist/iam"
step "zipapp" bash scripts/zipapp.sh --out "$dist"
step "image and SBOM" image
(cd "$dist" && find . -type f ! -name SHA256SUMS | sed 's|^\./||' | LC_ALL=C sort | xargs sha256sum >SHA256SUMS)
say "hubwright $version in $dist ($(du -sh "$dist" | cut -f1)) in $(( $(date +%s) - T0 ))s:"
(cd "$dist" && find . -type f | sed 's|^\./||' | LC_ALL=C sort) >&2
