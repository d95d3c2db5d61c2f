#!/usr/bin/env bash
# What the tests need on a machine, in one place, and the setup that installs it. `./dev setup` runs this file;
# `./dev test` sources it and checks the same list before it starts (setup_missing), stopping at once on a gap.
#
#   bash scripts/setup.sh    # = ./dev setup:
#     1. the Debian packages below that are missing: apt-get, as root, else through sudo (neither: it says what
#        to run, and stops);
#     2. the venv (scripts/venv.sh);
#     3. the real engines: scripts/go-version.sh, then scripts/tools.sh (built from their Go modules, cached in
#        $HUBWRIGHT_CACHE, default ~/.cache/hubwright; a second setup beside the first waits for its builds);
#     4. setup_missing again: anything still missing is named, and the exit status is 1.
#   On a machine where all is there and cached it takes seconds, and says so.
#
#   . scripts/setup.sh; setup_missing [--fast]   # what is missing, one line each with what installs it
#   (--fast: only the venv, what `./dev test --fast` needs). setup_path: a Go in /usr/local/go first on PATH.

# system_needs: the Debian packages the tests need. Each line: the package; what proves it is installed
# (comma: each of these; bar: either; a bare name is a command on PATH, a /path an executable file); why.
system_needs() {
    cat <<'EOF'
haproxy          haproxy|/usr/sbin/haproxy                  Debian's HAProxy (2.6 on bookworm): the wire-mode version floor is shown on it; scripts/tools.sh builds one >= 2.9 for the rest
build-essential  make,gcc                                   scripts/tools.sh builds HAProxy from source, and Gitea with cgo
golang-go        go|/usr/local/go/bin/go                    scripts/tools.sh builds the engines from their Go modules (Debian's is older than they need: scripts/go-version.sh says what to install)
bubblewrap       bwrap                                      tests/test_deploy_live.py: the pod's sandbox
tini             /usr/bin/tini                              ... and the image's ENTRYPOINT (PID 1) in it
prometheus       promtool                                   promtool checks the alerting rules (tests/test_monitoring.py)
openssh-client   ssh-keyscan,ssh                            the registry's Git repositories: ssh-keyscan reads a forge's host keys, and tests clone over Gitea's SSH server
postgresql-15    initdb|/usr/lib/postgresql/15/bin/initdb   tests/postgres.py: a real PostgreSQL server for the registry's facts history with several replicas
openssl          openssl                                    the envtest's certificates (doubles/envtest.py)
git              git                                        tests commit, clone and push
mmdebstrap       mmdebstrap                                 scripts/image.sh: the image's base from Debian's packages (tests/test_image_live.py builds it)
podman           podman                                     ... imports, checks and saves the image, and the tests run it (tools/containers.conf)
runc             runc                                       ... podman's runtime here (crun fails on this machine's cgroups)
chromium         /usr/bin/chromium                          tests/browser.py: the console's browser tests (Playwright drives Debian's Chromium; Playwright's own download is not served)
nodejs           node                                       npm (below) runs on it
npm              npm                                        scripts/tools.sh fetches axe-core with it, the accessibility checks of the browser tests (a Node.js from NodeSource brings its own npm)
EOF
}

# TOOL_BINS: what scripts/tools.sh puts in .tools/bin that the tests run (helm, syft: `make release`; actionlint:
# tests/test_release_workflow.py checks .github/workflows with it).
TOOL_BINS=(pulumi pulumi-resource-pulumi-python pulumi-analyzer-policy-python kube-apiserver kube-controller-manager
           kubectl etcd haproxy gitea helm syft actionlint)
# TOOL_FILES: what else scripts/tools.sh puts in .tools that the tests read (axe-core: tests/browser.py injects it
# into a page to check its accessibility).
TOOL_FILES=(share/axe-core/axe.min.js)

_setup_root() { cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd; }

# have PROOF: true when PROOF (the second column of system_needs) holds.
have() {
    local all=$1 need alt ok
    local -a needs alts
    IFS=, read -r -a needs <<<"$all"
    for need in "${needs[@]}"; do
        IFS='|' read -r -a alts <<<"$need"
        ok=0
        for alt in "${alts[@]}"; do
            case "$alt" in
                /*) [ -x "$alt" ] && ok=1 ;;
                *) command -v "$alt" >/dev/null 2>&1 && ok=1 ;;
            esac
            [ "$ok" = 1 ] && break
        done
        [ "$ok" = 1 ] || return 1
    done
}

# missing_packages: the packages of system_needs not installed, one line each: PACKAGE PROOF WHY.
missing_packages() {
    local package proof why
    while read -r package proof why; do
        have "$proof" || printf '%s %s %s\n' "$package" "$proof" "$why"
    done < <(system_needs)
}

# shellcheck disable=SC2120  # ./dev test passes --fast
# setup_missing [--fast]: what the tests need and is not there, one line each naming what installs it; status 1
# when anything is missing.
setup_missing() {
    local root gaps=() crds package proof why name project rest table venv
    root=$(_setup_root)
    venv=$(cd "$root" && bash scripts/venv.sh --check 2>&1) || gaps+=("the venv: ${venv#venv: }")
    if [ "${1:-}" != --fast ]; then
        while read -r package proof why; do
            gaps+=("$(printf '%s' "$proof" | sed 's/,/ and /g; s/|/ or /g') (Debian package $package; $why): apt-get install $package, or ./dev setup")
        done < <(missing_packages)
        for name in "${TOOL_BINS[@]}"; do
            [ -x "$root/.tools/bin/$name" ] || gaps+=(".tools/bin/$name: ./dev setup (scripts/tools.sh builds it)")
        done
        [ -d "$root/.tools/share/gitea/options/locale" ] \
            || gaps+=(".tools/share/gitea, Gitea's static files: ./dev setup (scripts/gitea.sh)")
        for name in "${TOOL_FILES[@]}"; do
            [ -s "$root/.tools/$name" ] || gaps+=(".tools/$name: ./dev setup (scripts/tools.sh fetches it)")
        done
        crds=()
        for table in "$root/tools/crds/modules.txt" "$root/tools/crds/generated.txt"; do
            while read -r project rest; do
                case "$project" in ''|'#'*) continue ;; esac
                [ -f "$root/.tools/crds/$project/.source" ] || crds+=("$project")
            done <"$table"
        done
        [ ${#crds[@]} -eq 0 ] || gaps+=(".tools/crds, other projects' CRDs, of ${crds[*]}: ./dev setup (scripts/tools.sh, from tools/crds/*.txt)")
    fi
    [ ${#gaps[@]} -eq 0 ] && return 0
    printf '%s\n' "${gaps[@]}"
    return 1
}

# setup_path: a Go unpacked into /usr/local/go (go.dev/dl) comes before Debian's older golang-go on PATH.
setup_path() {
    if [ -d /usr/local/go/bin ]; then
        case ":$PATH:" in *":/usr/local/go/bin:"*) ;; *) PATH="/usr/local/go/bin:$PATH" ;; esac
        export PATH
    fi
}

setup_main() {
    set -euo pipefail
    local root t0 lines packages=() sudo=() missing
    say() { printf '[setup] %s\n' "$*"; }
    die() { printf '[setup] ERROR: %s\n' "$*" >&2; exit 1; }
    root=$(_setup_root)
    cd "$root"
    t0=$(date +%s)
    setup_path

    # 1. system packages
    lines=$(missing_packages)
    if [ -z "$lines" ]; then
        say "system packages: all there ($(system_needs | awk '{print $1}' | paste -sd' ' -))"
    else
        mapfile -t packages < <(printf '%s\n' "$lines" | awk '{print $1}')
        local cmd="apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o DPkg::Lock::Timeout=300 ${packages[*]}"
        command -v apt-get >/dev/null || die "missing: ${packages[*]} (Debian package names), and no apt-get here to install them: install them yourself, then run ./dev setup again"
        if [ "$(id -u)" = 0 ]; then
            sudo=()
        elif command -v sudo >/dev/null; then
            sudo=(sudo)
        else
            die "missing: ${packages[*]}. Installing them needs root, and there is no sudo: as root, run: $cmd; then ./dev setup again"
        fi
        say "system packages missing: ${packages[*]}; running: ${sudo[*]} sh -c '$cmd'"
        "${sudo[@]}" sh -c "$cmd" >/dev/null || die "apt-get failed (see above): ${sudo[*]} sh -c '$cmd'"
        lines=$(missing_packages)
        [ -z "$lines" ] || die "still missing after apt-get: $(printf '%s\n' "$lines" | awk '{print $1 " (" $2 ")"}' | paste -sd' ' -)"
        say "system packages: installed ${packages[*]}"
    fi

    # 2. the venv
    bash scripts/venv.sh

    # 3. the real engines (Debian's golang-go is older than they need: say so now, not deep in a build)
    bash scripts/go-version.sh
    bash scripts/tools.sh

    # 4. everything ./dev test checks
    if ! missing=$(setup_missing); then
        printf '%s\n' "$missing" | sed 's/^/  - /' >&2
        die "still missing after setup (above)"
    fi
    say "ready in $(( $(date +%s) - t0 ))s: everything ./dev test needs is there"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    setup_main "$@"
fi
