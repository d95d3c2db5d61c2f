#!/usr/bin/env bash
# Put the real test engines into .tools/bin: the Pulumi CLI (+ Python helper
# scripts), kube-apiserver, kube-controller-manager (garbage collection and
# ResourceQuota usage in the envtest harness), kubectl (the client users type,
# which tests drive), etcd, the release tools (helm: the chart, pushed as an OCI artifact; syft: the SBOM;
# actionlint: checks .github/workflows), an HAProxy >= 2.9 (scripts/haproxy.sh) and Gitea (scripts/gitea.sh, the
# registry's test forge); then
# other projects' published CRDs into .tools/crds (scripts/crds.sh), and those generated from their Go types
# (scripts/crds-gen.sh, with controller-gen); and axe-core, the browser tests' accessibility checks, from npm
# into .tools/share/axe-core (tests/browser.py injects its axe.min.js into a page).
#
# Release binaries cannot be downloaded here, so each one is built from its Go
# module (tools/pulumi/go.mod, tools/kube/go.mod, tools/release/go.mod pin the versions). A binary
# already on PATH at the pinned version is used as it is; a built binary is
# kept in "$HUBWRIGHT_CACHE/bin" stamped with its version, together with
# GOMODCACHE and GOCACHE, so a machine that keeps the cache rebuilds nothing.
# Runs may share the cache (two clones on one machine) and run at once: each binary is built under a lock on
# the cache, into a temporary of its own renamed into place (scripts/lib/cache.sh); a run that finds a build
# under way says so, waits for it, and takes what it built.
#
#   scripts/tools.sh            # build what is missing, link into .tools/bin
#   HUBWRIGHT_CACHE=/some/dir scripts/tools.sh
#   HUBWRIGHT_TOOLS_REBUILD=1 scripts/tools.sh   # ignore PATH and cached binaries
#
# Exit status is non-zero, with the reason, when a required build fails.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN="$ROOT/.tools/bin"
CACHE=${HUBWRIGHT_CACHE:-$HOME/.cache/hubwright}
REBUILD=${HUBWRIGHT_TOOLS_REBUILD:-0}

export PATH="$PATH:/usr/local/go/bin"
export GOMODCACHE="$CACHE/go/mod"
export GOCACHE="$CACHE/go/build"
export GOFLAGS="-trimpath -buildvcs=false"
export GOTOOLCHAIN=${GOTOOLCHAIN:-local}
export CGO_ENABLED=0

# Versions come from the tools modules, the single place they are pinned.
modver() { awk -v m="$2" '$1 == m && $2 ~ /^v/ {print $2; exit}' "$ROOT/tools/$1/go.mod"; }
PULUMI_VERSION=$(modver pulumi github.com/pulumi/pulumi/pkg/v3)
KUBE_VERSION=$(modver kube k8s.io/kubernetes)
ETCD_VERSION=$(modver kube go.etcd.io/etcd/server/v3)
HELM_VERSION=$(modver release helm.sh/helm/v3)
SYFT_VERSION=$(modver release github.com/anchore/syft)
ACTIONLINT_VERSION=$(modver release github.com/rhysd/actionlint)
# The Kubernetes version helm assumes with no cluster to ask (`helm template`, `helm lint`): its Makefile derives
# it from the k8s.io/client-go it is built with (v0.X.Y: Kubernetes 1.X).
HELM_K8S_VERSION=$(modver release k8s.io/client-go)
# The Python SDK's version: a pulumi CLI on PATH at this version is also fine.
PY_PULUMI_VERSION=$(sed -n 's/^pulumi==\([0-9.]*\).*/v\1/p' "$ROOT/requirements.txt" 2>/dev/null || true)

T0=$(date +%s)
say() { printf '[tools] %s\n' "$*"; }
die() { printf '[tools] ERROR: %s\n' "$*" >&2; exit 1; }
elapsed() { echo "$(( $(date +%s) - $1 ))s"; }

mkdir -p "$BIN" "$CACHE/bin" "$CACHE/logs"
. "$ROOT/scripts/progress.sh"  # ticking: how long a build has been going, on a terminal
. "$ROOT/scripts/lib/cache.sh"  # cache_build, place_*: safe when runs share the cache or .tools

# place SRC NAME: put SRC at .tools/bin/NAME (hard link, else copy; renamed into place).
place() { place_file "$1" "$BIN/$2"; }

# on_path NAME VERSION_CMD WANT...: a NAME on PATH (not ours) whose version
# output contains one of WANT.
on_path() {
    local name=$1 vcmd=$2; shift 2
    [ "$REBUILD" = 1 ] && return 1
    local p out w
    p=$(PATH=$(printf '%s' "$PATH" | tr ':' '\n' | grep -vxF "$BIN" | paste -sd: -) command -v "$name" 2>/dev/null) || return 1
    out=$("$p" $vcmd 2>&1 | head -3) || return 1
    for w in "$@"; do
        [ -n "$w" ] && printf '%s' "$out" | grep -qF -- "$w" && { echo "$p"; return 0; }
    done
    return 1
}

# gobuild NAME VERSION MODDIR PKG [LDFLAGS]: build into the cache unless there.
gobuild() {
    local name=$1 ver=$2 moddir=$3 pkg=$4 ldx=${5:-}
    local out="$CACHE/bin/$name-$ver" log="$CACHE/logs/$name-$ver.log" t
    t=$(date +%s)
    if [ "$REBUILD" != 1 ] && [ -x "$out" ]; then
        place "$out" "$name"
        say "$name $ver: cached ($out) [$(elapsed "$t")]"
        return 0
    fi
    command -v go >/dev/null || die "$name $ver: no 'go' toolchain on PATH; install Go >= 1.26 (https://go.dev/dl) or put $name $ver on PATH"
    # Once, before the first build: an old go (Debian's) fails at once, saying what is needed, not deep in a build.
    [ -n "${GO_CHECKED:-}" ] || { bash "$ROOT/scripts/go-version.sh" >&2 || die "$name $ver: see above"; GO_CHECKED=1; }
    local rebuild=()
    [ "$REBUILD" = 1 ] && rebuild=(--rebuild)
    if ! cache_build "${rebuild[@]}" "$out" go_build "$name $ver" "$moddir" "$pkg" "-s -w $ldx" "$log"; then
        tail -n 30 "$log" >&2 2>/dev/null || true
        die "$name $ver: build failed (full log: $log)"
    fi
    place "$out" "$name"
    if [ "$CACHE_BUILT" = 1 ]; then
        say "$name $ver: built [$(elapsed "$t")]"
    else
        say "$name $ver: cached ($out), built by another run while this one waited [$(elapsed "$t")]"
    fi
}

# go_build LABEL MODDIR PKG LDFLAGS LOG: gobuild's build, run by cache_build under the cache's lock for the
# binary: PKG into $CACHE_TMP, its output into LOG (written by the one run that builds).
go_build() {
    say "$1: building $3 (log: $5) ..."
    ticking "$1" sh -c 'cd "$1" && go build -o "$2" -ldflags="$3" "$4"' _ \
        "$ROOT/tools/$2" "$CACHE_TMP" "$4" "$3" >"$5" 2>&1 || return  # (not under set -e: ticking cleans up)
}

# --- pulumi -----------------------------------------------------------------
t=$(date +%s)
if p=$(on_path pulumi version "$PY_PULUMI_VERSION" "$PULUMI_VERSION"); then
    place_link "$p" "$BIN/pulumi"
    say "pulumi: using $p ($("$p" version)) [$(elapsed "$t")]"
else
    gobuild pulumi "$PULUMI_VERSION" pulumi github.com/pulumi/pulumi/pkg/v3/cmd/pulumi \
        "-X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=$PULUMI_VERSION"
fi

# --- Python helpers shipped beside the CLI in release tarballs ---------------
# pulumi-resource-pulumi-python runs `python -m pulumi.dynamic` (dynamic
# providers); pulumi-language-python-exec is the language host's entry script.
# Both are plain scripts in the sdk/v3 module's source tree.
t=$(date +%s)
sdkdir=""
if command -v go >/dev/null; then
    sdkdir=$(cd "$ROOT/tools/pulumi" && go mod download -json github.com/pulumi/pulumi/sdk/v3 2>/dev/null \
        | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p') || true
    [ -n "$sdkdir" ] && [ -d "$sdkdir/python" ] || die "pulumi helpers: cannot find the github.com/pulumi/pulumi/sdk/v3 module source (go mod download failed)"
else
    say "pulumi python helpers: no 'go' on PATH to fetch them; dynamic providers need pulumi-resource-pulumi-python on PATH"
fi
[ -n "$sdkdir" ] && for f in "$sdkdir/python/dist/pulumi-resource-pulumi-python" \
         "$sdkdir/python/cmd/pulumi-language-python-exec"; do
    [ -f "$f" ] || continue
    place_copy "$f" "$BIN/$(basename "$f")"
done
# The policy packs' starter (policy/): no longer in the SDK's source, so ours (the same two lines it used to be).
place_copy "$ROOT/scripts/pulumi-analyzer-policy-python" "$BIN/pulumi-analyzer-policy-python"
say "pulumi python helpers: $(cd "$BIN" && ls pulumi-*python* 2>/dev/null | grep -v '^pulumi-language-python$' | paste -sd' ' -) [$(elapsed "$t")]"

# --- pulumi-language-python (optional) ----------------------------------------
# Needed only for Pulumi programs run from a directory; the Automation API's
# inline programs (what the tests use) run in-process and do not use it.
t=$(date +%s)
if p=$(on_path pulumi-language-python -version "$PY_PULUMI_VERSION" "$PULUMI_VERSION" 2>/dev/null) \
   || p=$(on_path pulumi-language-python --version "$PY_PULUMI_VERSION" "$PULUMI_VERSION" 2>/dev/null); then
    place_link "$p" "$BIN/pulumi-language-python"
    say "pulumi-language-python: using $p [$(elapsed "$t")]"
elif [ -x "$CACHE/bin/pulumi-language-python-$PULUMI_VERSION" ]; then
    place "$CACHE/bin/pulumi-language-python-$PULUMI_VERSION" pulumi-language-python
    say "pulumi-language-python $PULUMI_VERSION: cached [$(elapsed "$t")]"
else
    say "pulumi-language-python: not built - the module github.com/pulumi/pulumi/sdk/python/cmd/pulumi-language-python/v3 is not served by this machine's Go module proxy; inline Automation API programs do not need it (put one on PATH to use it)"
fi

# --- kube-apiserver -----------------------------------------------------------
kmaj=${KUBE_VERSION#v}; kmin=${kmaj#*.}; kmin=${kmin%%.*}; kmaj=${kmaj%%.*}
kld=""
for vp in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    kld="$kld -X $vp.gitVersion=$KUBE_VERSION -X $vp.gitMajor=$kmaj -X $vp.gitMinor=$kmin -X $vp.gitTreeState=clean"
done
t=$(date +%s)
if p=$(on_path kube-apiserver --version "Kubernetes $KUBE_VERSION"); then
    place_link "$p" "$BIN/kube-apiserver"
    say "kube-apiserver: using $p [$(elapsed "$t")]"
else
    gobuild kube-apiserver "$KUBE_VERSION" kube k8s.io/kubernetes/cmd/kube-apiserver "$kld"
fi

# --- kube-controller-manager ---------------------------------------------------
# The same module and version as kube-apiserver: the envtest harness runs its garbage collector (an agent's
# objects owned by their Cluster go when it goes) and its ResourceQuota controller (usage of a tenant's quota).
t=$(date +%s)
if p=$(on_path kube-controller-manager --version "Kubernetes $KUBE_VERSION"); then
    place_link "$p" "$BIN/kube-controller-manager"
    say "kube-controller-manager: using $p [$(elapsed "$t")]"
else
    gobuild kube-controller-manager "$KUBE_VERSION" kube k8s.io/kubernetes/cmd/kube-controller-manager "$kld"
fi

# --- kubectl --------------------------------------------------------------------
# The same module and version as kube-apiserver: tests drive the client users type (apply -k, get, explain,
# api-resources) against the envtest API server.
t=$(date +%s)
if p=$(on_path kubectl "version --client" "Client Version: $KUBE_VERSION"); then
    place_link "$p" "$BIN/kubectl"
    say "kubectl: using $p [$(elapsed "$t")]"
else
    gobuild kubectl "$KUBE_VERSION" kube k8s.io/kubernetes/cmd/kubectl "$kld"
fi

# --- etcd ---------------------------------------------------------------------
t=$(date +%s)
if p=$(on_path etcd --version "etcd Version: ${ETCD_VERSION#v}"); then
    place_link "$p" "$BIN/etcd"
    say "etcd: using $p [$(elapsed "$t")]"
else
    gobuild etcd "$ETCD_VERSION" kube go.etcd.io/etcd/server/v3
fi

# --- helm -------------------------------------------------------------------------
# The release tools (tools/release/go.mod): `make release` packages the chart with helm and writes the image's SBOM
# with syft; the release workflow pushes the chart with helm, and actionlint checks that workflow
# (tests/test_release_workflow.py). The version ldflags are those of each project's own release build, so
# `helm version`, `syft version` and `actionlint -version` name the pinned version.
hk=${HELM_K8S_VERSION#v0.}; hk=${hk%%.*}
hld="-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
for vp in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
    hld="$hld -X $vp.k8sVersionMajor=1 -X $vp.k8sVersionMinor=$hk"
done
t=$(date +%s)
if p=$(on_path helm version "Version:\"$HELM_VERSION\""); then
    place_link "$p" "$BIN/helm"
    say "helm: using $p [$(elapsed "$t")]"
else
    gobuild helm "$HELM_VERSION" release helm.sh/helm/v3/cmd/helm "$hld"
fi

# --- syft -------------------------------------------------------------------------
t=$(date +%s)
if p=$(on_path syft --version "syft ${SYFT_VERSION#v}"); then
    place_link "$p" "$BIN/syft"
    say "syft: using $p [$(elapsed "$t")]"
else
    gobuild syft "$SYFT_VERSION" release github.com/anchore/syft/cmd/syft \
        "-X main.version=${SYFT_VERSION#v} -X main.gitDescription=$SYFT_VERSION"
fi

# --- actionlint -------------------------------------------------------------------
# Its release binaries print the version without the v (1.7.12), `go install` ones with it (v1.7.12): either is fine.
t=$(date +%s)
if p=$(on_path actionlint -version "${ACTIONLINT_VERSION#v}"); then
    place_link "$p" "$BIN/actionlint"
    say "actionlint: using $p [$(elapsed "$t")]"
else
    gobuild actionlint "$ACTIONLINT_VERSION" release github.com/rhysd/actionlint/cmd/actionlint \
        "-X github.com/rhysd/actionlint.version=${ACTIONLINT_VERSION#v} -X 'github.com/rhysd/actionlint.installedFrom=built from source by hubwright scripts/tools.sh (tools/release/go.mod)'"
fi

# --- axe-core (the browser tests' accessibility checks, tests/browser.py) ------------------
# Not a Go module: the npm package at the version and integrity pinned here (`npm view axe-core@V dist.integrity`),
# fetched once with `npm pack` (which checks the tarball against the registry's integrity; it is checked again
# against the pinned one), unpacked into "$CACHE/share/axe-core-$AXE_VERSION" (npm's own cache in "$CACHE/npm")
# and linked at .tools/share/axe-core, as Gitea's static files are. Nothing of it is run here: its axe.min.js is
# evaluated in the page under test.
AXE_VERSION=4.14.1
AXE_INTEGRITY=sha512-FHfa+lmNjQZfJz1q8wKqIDwC6DExcHt/pkjNQb09a3NPjCKg2rhu5qb2S4r76ASyFNNtuFooJpZe37OgudVGtQ==

# axe_fetch LOG: axe-core's fetch, run by cache_build under the cache's lock: the package's files into $CACHE_TMP.
axe_fetch() {
    local log=$1 work tgz got
    work=$(dirname "$CACHE_TMP")/npm  # beside $CACHE_TMP, in cache_build's private folder: removed with it
    mkdir -p "$work"
    say "axe-core $AXE_VERSION: npm pack axe-core@$AXE_VERSION (log: $log) ..."
    (cd "$work" && npm_config_cache="$CACHE/npm" npm_config_update_notifier=false npm_config_fund=false \
        npm pack --loglevel=warn "axe-core@$AXE_VERSION") >"$log" 2>&1 || return
    tgz="$work/axe-core-$AXE_VERSION.tgz"
    [ -f "$tgz" ] || { say "axe-core $AXE_VERSION: npm pack wrote no $(basename "$tgz")"; return 1; }
    got="sha512-$(openssl dgst -sha512 -binary "$tgz" | base64 -w0)"
    if [ "$got" != "$AXE_INTEGRITY" ]; then
        say "axe-core $AXE_VERSION: the tarball's integrity is $got, not the pinned $AXE_INTEGRITY"
        return 1
    fi
    mkdir -p "$CACHE_TMP"
    tar -xzf "$tgz" -C "$CACHE_TMP" --strip-components=1 --no-same-owner \
        package/axe.min.js package/LICENSE package/package.json
    [ -s "$CACHE_TMP/axe.min.js" ] || { say "axe-core $AXE_VERSION: no axe.min.js in the package"; return 1; }
}

t=$(date +%s)
axe="$CACHE/share/axe-core-$AXE_VERSION"
mkdir -p "$ROOT/.tools/share"
if [ "$REBUILD" != 1 ] && [ -s "$axe/axe.min.js" ]; then
    place_link "$axe" "$ROOT/.tools/share/axe-core"
    say "axe-core $AXE_VERSION: cached ($axe) [$(elapsed "$t")]"
else
    command -v npm >/dev/null || die "axe-core $AXE_VERSION: no npm on PATH (apt-get install nodejs npm, or ./dev setup)"
    rebuild=()
    [ "$REBUILD" = 1 ] && rebuild=(--rebuild)
    mkdir -p "$CACHE/share"
    if ! cache_build "${rebuild[@]}" "$axe" axe_fetch "$CACHE/logs/axe-core-$AXE_VERSION.log"; then
        tail -n 20 "$CACHE/logs/axe-core-$AXE_VERSION.log" >&2 2>/dev/null || true
        die "axe-core $AXE_VERSION: fetch failed (log: $CACHE/logs/axe-core-$AXE_VERSION.log)"
    fi
    place_link "$axe" "$ROOT/.tools/share/axe-core"
    if [ "$CACHE_BUILT" = 1 ]; then
        say "axe-core $AXE_VERSION: fetched, integrity checked [$(elapsed "$t")]"
    else
        say "axe-core $AXE_VERSION: cached ($axe), fetched by another run while this one waited [$(elapsed "$t")]"
    fi
fi

# --- haproxy (>= 2.9, for custom-tlv) ----------------------------------------------
bash "$ROOT/scripts/haproxy.sh" || die "haproxy: see above"

# --- gitea (the registry's Git repositories are tested against a real forge) -----------
bash "$ROOT/scripts/gitea.sh" || die "gitea: see above"

# --- other projects' CRDs (Cluster API, Prometheus Operator, ...) -------------------
bash "$ROOT/scripts/crds.sh" || die "third-party CRDs: see above"
# Hive's ClusterDeployment, generated from its Go types by controller-gen (also linked into .tools/bin).
bash "$ROOT/scripts/crds-gen.sh" || die "third-party CRDs generated from Go types: see above"

# --- check --------------------------------------------------------------------
"$BIN/pulumi" version >/dev/null 2>&1 || die "pulumi in $BIN does not run"
"$BIN/kube-apiserver" --version >/dev/null 2>&1 || die "kube-apiserver in $BIN does not run"
"$BIN/kube-controller-manager" --version >/dev/null 2>&1 || die "kube-controller-manager in $BIN does not run"
"$BIN/kubectl" version --client >/dev/null 2>&1 || die "kubectl in $BIN does not run"
"$BIN/etcd" --version >/dev/null 2>&1 || die "etcd in $BIN does not run"
"$BIN/helm" version >/dev/null 2>&1 || die "helm in $BIN does not run"
"$BIN/syft" --version >/dev/null 2>&1 || die "syft in $BIN does not run"
"$BIN/actionlint" -version >/dev/null 2>&1 || die "actionlint in $BIN does not run"
"$BIN/haproxy" -v >/dev/null 2>&1 || die "haproxy in $BIN does not run"
"$BIN/gitea" --version >/dev/null 2>&1 || die "gitea in $BIN does not run"
[ -s "$ROOT/.tools/share/axe-core/axe.min.js" ] || die "axe-core: no $ROOT/.tools/share/axe-core/axe.min.js"
say "ready in $BIN: pulumi $("$BIN/pulumi" version), $("$BIN/kube-apiserver" --version), kubectl $("$BIN/kubectl" version --client | sed -n 's/^Client Version: //p'), etcd $("$BIN/etcd" --version | sed -n 's/^etcd Version: //p'), helm $("$BIN/helm" version --template '{{.Version}}'), $("$BIN/syft" --version), actionlint $("$BIN/actionlint" -version | head -n 1), $("$BIN/haproxy" -v | head -n 1 | cut -d' ' -f1-3), $("$BIN/gitea" --version | cut -d' ' -f1-3), axe-core $AXE_VERSION [total $(elapsed "$T0")]"
