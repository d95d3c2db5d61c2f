#!/usr/bin/env bash
# The hubwright image, built by the project from parts it can verify, without Docker:
#
#   bash scripts/image.sh --out dist/hubwright-<version>.oci.tar \
#        [--aws-plugin PATH_OR_URL --aws-plugin-sha256 SUM] [--snapshot 20261101T000000Z] [--store DIR]
#
#   base     Debian bookworm from Debian's signed packages (mmdebstrap; apt checks every package's signature):
#            python3 (3.11), ca-certificates, tini (PID 1), openssh-client (ssh-keyscan), libstdc++6 (grpcio). SOURCE_DATE_EPOCH is the
#            last commit's time unless set. --snapshot pins the archive to snapshot.debian.org at that time (where
#            it is reachable); without it, the mirror's bookworm of today, and the exact package versions go in the
#            image (/usr/local/share/hubwright/packages.txt) so two builds can be compared.
#   python   requirements.txt's pinned distributions, installed with this checkout's pip (its cache) into
#            /usr/local/lib/python3.11/dist-packages; the venv's Python must be the base's 3.11.
#   pulumi   the CLI scripts/tools.sh built from its Go module (.tools/bin/pulumi), checked to be requirements.txt's
#            pulumi version; the Python helpers tools.sh places beside it; in /usr/local/bin. Not a download.
#   aws      the provider plugin is an input: a file path or an https URL, and its SHA-256 (a wrong sum fails,
#            naming both). Without it the image is tagged <version>-noplugin (stacks.release.image_tag), its label
#            io.hubwright.aws-plugin.sha256 is "none", and its `serve` answers /readyz 503 naming the plugin
#            (automation/adapters/engine/plugins.py). PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION=true in every image.
#   code     stacks, components, automation, policy, __main__.py, Pulumi.yaml, pyproject.toml, LICENSE in /app.
#   runs as  uid 65532 on a read-only root (components/controlplane.py): PULUMI_HOME=/var/cache/pulumi and /tmp
#            are the pod's volumes; USER=hubwright names it for the pulumi CLI; tini is the ENTRYPOINT.
#
# The root filesystem is imported with podman (tools/containers.conf: runc, cgroupfs, no ulimits of its own) into a
# private storage (--store, default $HUBWRIGHT_CACHE/podman) and saved as an OCI archive whose one timestamp is set
# to SOURCE_DATE_EPOCH (the same inputs give the same bytes); that archive, loaded back, must say
# `hubwright <stacks.release.version()>` before it is written to --out. Needs root (mmdebstrap's and podman's), and
# Debian's mmdebstrap, podman, runc (scripts/setup.sh installs them). The Dockerfile is the same recipe on
# python:3.11-slim for a machine with Docker.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${PYTHON:-$ROOT/.venv/bin/python}
say() { printf '[image] %s\n' "$*" >&2; }
die() { printf '[image] ERROR: %s\n' "$*" >&2; exit 1; }
usage() { sed -n '2,5p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2; }

out="" plugin="" plugin_sum="" snapshot="" store=""
while [ $# -gt 0 ]; do
    case "$1" in
        --out) out=${2:?--out needs a path}; shift 2 ;;
        --aws-plugin) plugin=${2:?--aws-plugin needs a path or URL}; shift 2 ;;
        --aws-plugin-sha256) plugin_sum=${2:?--aws-plugin-sha256 needs a SHA-256}; shift 2 ;;
        --snapshot) snapshot=${2:?--snapshot needs a time like 20261101T000000Z}; shift 2 ;;
        --store) store=${2:?--store needs a directory}; shift 2 ;;
        -h|--help) usage ;;
        *) printf '[image] unknown argument: %s\n' "$1" >&2; usage ;;
    esac
done
[ -n "$out" ] || { printf '[image] --out is required\n' >&2; usage; }
case "$out" in *.oci.tar) ;; *) die "--out $out: name it <something>.oci.tar (an OCI archive)" ;; esac
if [ -n "$plugin" ] || [ -n "$plugin_sum" ]; then
    [ -n "$plugin" ] && [ -n "$plugin_sum" ] || die "--aws-plugin and --aws-plugin-sha256 go together (the plugin and its SHA-256)"
    [[ $plugin_sum =~ ^[0-9a-f]{64}$ ]] || die "--aws-plugin-sha256 $plugin_sum is not a SHA-256 (64 lowercase hex digits)"
fi
[ -z "$snapshot" ] || [[ $snapshot =~ ^[0-9]{8}T[0-9]{6}Z$ ]] || die "--snapshot $snapshot: a time like 20261101T000000Z"
[ "$(id -u)" = 0 ] || die "needs root (mmdebstrap builds the root filesystem as root; podman's storage is root's)"
for cmd in mmdebstrap podman runc git sha256sum tar; do
    command -v "$cmd" >/dev/null || die "$cmd not found: apt-get install mmdebstrap podman runc (or ./dev setup)"
done
[ -x "$PY" ] || die "$PY not found: the venv (scripts/venv.sh) installs requirements.txt into the image with its pip"

t0=$(date +%s)
cd "$ROOT"
release() { "$PY" -c "from stacks import release; print($1)"; }
VERSION=$(release 'release.version()')
with_plugin=False; [ -n "$plugin" ] && with_plugin=True
TAG=$(release "release.image_tag(with_plugin=$with_plugin)")
PLUGIN_LABEL=$(release 'release.AWS_PLUGIN_LABEL')
PLUGIN_RECORD=$(release 'release.IMAGE_AWS_PLUGIN')
NO_PLUGIN=$(release 'release.NO_AWS_PLUGIN')
SOURCE=$(release '"https://github.com/" + release.IMAGE_REPOSITORY.split("/")[1] + "/" + release.NAME')
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct)}
export SOURCE_DATE_EPOCH
CREATED=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)
REVISION=$(git rev-parse HEAD)
pin() { sed -n "s/^$1==\([^ #]*\).*/\1/p" requirements.txt; }
PULUMI_VERSION=$(pin pulumi)

export CONTAINERS_CONF="$ROOT/tools/containers.conf"
store=${store:-${HUBWRIGHT_PODMAN_STORE:-${HUBWRIGHT_CACHE:-$HOME/.cache/hubwright}/podman}}
mkdir -p "$store"
store=$(cd "$store" && pwd)
# podman refuses a runroot longer than 50 characters: a storage deep in a tree keeps its runtime state in a short
# folder named after it (a storage's runroot is fixed in its database once made).
runroot=$store/run
[ ${#runroot} -le 50 ] || runroot=/tmp/hwpod-$(printf '%s' "$store" | sha256sum | cut -c1-12)
PODMAN=(podman --root "$store/root" --runroot "$runroot" --storage-driver "${HUBWRIGHT_PODMAN_DRIVER:-overlay}"
        --runtime runc --cgroup-manager cgroupfs)

work=$(mktemp -d "${TMPDIR:-/tmp}/hubwright-image.XXXXXX")
trap 'rm -rf "$work"; rm -f "$out.partial" "$out.podman"' EXIT
rootfs="$work/rootfs"
say "building $TAG (SOURCE_DATE_EPOCH=$SOURCE_DATE_EPOCH, $CREATED; commit $REVISION)"

# --- the inputs that are not Debian packages, checked before anything is built ----------------------------------
bin="$ROOT/.tools/bin"
for f in pulumi pulumi-resource-pulumi-python pulumi-language-python-exec pulumi-analyzer-policy-python; do
    [ -x "$bin/$f" ] || die "$bin/$f not found: scripts/tools.sh builds it (./dev setup)"
done
cli=$("$bin/pulumi" version 2>/dev/null) || die "$bin/pulumi does not run"
[ "$cli" = "v$PULUMI_VERSION" ] || die "$bin/pulumi is $cli, requirements.txt pins pulumi $PULUMI_VERSION: run scripts/tools.sh"

if [ -n "$plugin" ]; then
    case "$plugin" in
        https://*|http://*)
            curl -fsSL --retry 2 --max-time 900 -o "$work/aws-plugin.in" "$plugin" \
                || die "--aws-plugin $plugin: not reachable from here (download it elsewhere and pass its path)" ;;
        *)  [ -f "$plugin" ] || die "--aws-plugin $plugin: no such file"
            cp "$plugin" "$work/aws-plugin.in" ;;
    esac
    got=$(sha256sum "$work/aws-plugin.in" | cut -d' ' -f1)
    [ "$got" = "$plugin_sum" ] || die "--aws-plugin $plugin: its SHA-256 is $got, not $plugin_sum (--aws-plugin-sha256): refused"
    mkdir "$work/aws-plugin"
    if tar -tzf "$work/aws-plugin.in" pulumi-resource-aws >/dev/null 2>&1; then  # the release's archive
        tar -xzf "$work/aws-plugin.in" -C "$work/aws-plugin" pulumi-resource-aws
    else  # the executable itself
        cp "$work/aws-plugin.in" "$work/aws-plugin/pulumi-resource-aws"
    fi
    chmod 0755 "$work/aws-plugin/pulumi-resource-aws"
    say "aws plugin: $plugin, sha256 $got (verified)"
else
    say "aws plugin: none given: the image is $TAG, labelled $PLUGIN_LABEL=$NO_PLUGIN, and its serve is not ready"
fi

# --- the base: Debian's packages -----------------------------------------------------------------------------------
if [ -n "$snapshot" ]; then
    mirror="http://snapshot.debian.org/archive/debian/$snapshot"
    sources=("deb [check-valid-until=no] $mirror bookworm main" "deb [check-valid-until=no] $mirror bookworm-updates main"
             "deb [check-valid-until=no] http://snapshot.debian.org/archive/debian-security/$snapshot bookworm-security main")
    base="debian bookworm, snapshot.debian.org $snapshot"
else
    mirror=${HUBWRIGHT_DEBIAN_MIRROR:-http://deb.debian.org/debian}
    sources=("deb $mirror bookworm main" "deb $mirror bookworm-updates main"
             "deb ${HUBWRIGHT_DEBIAN_SECURITY:-http://deb.debian.org/debian-security} bookworm-security main")
    base="debian bookworm, $mirror on $(date -u +%Y-%m-%d)"
fi
t=$(date +%s)
mmdebstrap --quiet --variant=essential --include=python3,python-is-python3,ca-certificates,tini,openssh-client,libstdc++6 \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    bookworm "$rootfs" "${sources[@]}" >"$work/mmdebstrap.log" 2>&1 \
    || { tail -n 30 "$work/mmdebstrap.log" >&2; die "mmdebstrap failed (above)"; }
say "base: $base [$(( $(date +%s) - t ))s]"

# --- requirements.txt, with the checkout's pip (and its cache), for the base's Python -----------------------------
t=$(date +%s)
base_py=$(chroot "$rootfs" python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
venv_py=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
[ "$base_py" = "$venv_py" ] || die "the base's Python is $base_py, the venv's $venv_py: the wheels would not match"
site="/usr/local/lib/python$base_py/dist-packages"  # on Debian's python3's sys.path
"$PY" -m pip install --quiet --disable-pip-version-check --no-warn-script-location --no-compile \
    --only-binary=:all: --target "$rootfs$site" -r requirements.txt \
    || die "pip install -r requirements.txt failed (above)"
rm -rf "${rootfs:?}$site/bin"  # console scripts naming the venv's python: the image runs python -m
say "python: requirements.txt into $site [$(( $(date +%s) - t ))s]"

# --- pulumi, the plugin, the code --------------------------------------------------------------------------------
install -m 0755 "$bin/pulumi" "$bin/pulumi-resource-pulumi-python" "$bin/pulumi-language-python-exec" \
    "$bin/pulumi-analyzer-policy-python" "$rootfs/usr/local/bin/"
[ -z "$plugin" ] || install -m 0755 "$work/aws-plugin/pulumi-resource-aws" "$rootfs/usr/local/bin/"
mkdir -p "$rootfs/app" "$rootfs/var/cache/pulumi" "$rootfs$(dirname "$PLUGIN_RECORD")"
tar -C "$ROOT" --exclude=__pycache__ --exclude='*.pyc' -cf - stacks components automation policy __main__.py \
    Pulumi.yaml pyproject.toml LICENSE | tar -C "$rootfs/app" -xf -
echo "${plugin_sum:-$NO_PLUGIN}" >"$rootfs$PLUGIN_RECORD"
chroot "$rootfs" dpkg-query -W -f '${Package}=${Version}\n' >"$rootfs$(dirname "$PLUGIN_RECORD")/packages.txt"
"$PY" -m pip list --disable-pip-version-check --path "$rootfs$site" --format=freeze \
    >"$rootfs$(dirname "$PLUGIN_RECORD")/python-packages.txt"
# Compiled once here: the root is read-only at run time. unchecked-hash: no stat of each source at import.
chroot "$rootfs" python3 -m compileall -q -j 0 --invalidation-mode unchecked-hash "$site" /app >/dev/null \
    || die "compileall failed"
rm -rf "$rootfs/var/cache/apt/"* "$rootfs/var/lib/apt/lists/"* "$rootfs/var/log/"*.log "$rootfs/root/.cache"
packages_sum=$(sha256sum "$rootfs$(dirname "$PLUGIN_RECORD")/packages.txt" | cut -d' ' -f1)

# --- the image ----------------------------------------------------------------------------------------------------
t=$(date +%s)
tar -C "$rootfs" --sort=name --numeric-owner --mtime="@$SOURCE_DATE_EPOCH" --clamp-mtime \
    --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime -cf "$work/rootfs.tar" .
rm -rf "$rootfs"
changes=(
    "ENV PATH=/usr/local/bin:/usr/bin:/bin" "ENV LANG=C.UTF-8"
    "ENV PULUMI_HOME=/var/cache/pulumi" "ENV PULUMI_SKIP_UPDATE_CHECK=true" "ENV USER=hubwright"
    "ENV PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION=true"
    "WORKDIR /app" "USER 65532" 'ENTRYPOINT ["/usr/bin/tini", "--"]' 'CMD ["python", "-m", "automation", "--help"]'
    "LABEL org.opencontainers.image.title=hubwright" "LABEL org.opencontainers.image.version=$VERSION"
    "LABEL org.opencontainers.image.source=$SOURCE" "LABEL org.opencontainers.image.licenses=Apache-2.0"
    "LABEL org.opencontainers.image.created=$CREATED" "LABEL org.opencontainers.image.revision=$REVISION"
    "LABEL org.opencontainers.image.base.name=\"$base\""
    "LABEL io.hubwright.base.packages.sha256=$packages_sum"
    "LABEL $PLUGIN_LABEL=${plugin_sum:-$NO_PLUGIN}"
)
change_args=()
for c in "${changes[@]}"; do change_args+=(--change "$c"); done
"${PODMAN[@]}" rmi --force "$TAG" >/dev/null 2>&1 || true
"${PODMAN[@]}" import --quiet "${change_args[@]}" --message "hubwright $VERSION ($REVISION)" \
    "$work/rootfs.tar" "$TAG" >/dev/null || die "podman import failed"
rm -f "$work/rootfs.tar"
"${PODMAN[@]}" image prune --force >/dev/null 2>&1 || true

# --- the archive: podman's, with its one timestamp (the config's "created", podman import's clock) made
# SOURCE_DATE_EPOCH; the layer is already reproducible (same inputs, same bytes), so the whole archive is ----------
mkdir -p "$(dirname "$out")"
rm -f "$out.partial" "$out.podman"
"${PODMAN[@]}" save --quiet --format oci-archive -o "$out.podman" "$TAG" || die "podman save failed"
"$PY" - "$out.podman" "$out.partial" "$SOURCE_DATE_EPOCH" <<'PY' || die "rewriting the archive's timestamps failed"
import hashlib, io, json, sys, tarfile, time
src, dst, epoch = sys.argv[1], sys.argv[2], int(sys.argv[3])
created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))
with tarfile.open(src) as tar:
    index = json.load(tar.extractfile("index.json"))
    [entry] = index["manifests"]
    blob = lambda digest: f"blobs/sha256/{digest.split(':', 1)[1]}"
    manifest = json.load(tar.extractfile(blob(entry["digest"])))
    config = json.load(tar.extractfile(blob(manifest["config"]["digest"])))
    config["created"] = created
    for step in config.get("history", []):
        step["created"] = created
    def put(obj):
        data = json.dumps(obj, separators=(",", ":")).encode()
        return data, f"sha256:{hashlib.sha256(data).hexdigest()}"
    config_data, config_digest = put(config)
    manifest["config"].update(digest=config_digest, size=len(config_data))
    manifest_data, manifest_digest = put(manifest)
    entry.update(digest=manifest_digest, size=len(manifest_data))
    index_data, _ = put(index)
    layers = [blob(layer["digest"]) for layer in manifest["layers"]]
    new = {blob(config_digest): config_data, blob(manifest_digest): manifest_data, "index.json": index_data,
           "oci-layout": tar.extractfile("oci-layout").read()}
    with tarfile.open(dst, "w", format=tarfile.PAX_FORMAT) as out:
        def member(name, size, kind=tarfile.REGTYPE):
            info = tarfile.TarInfo(name)
            info.size, info.type, info.mtime, info.mode = size, kind, epoch, 0o755 if kind == tarfile.DIRTYPE else 0o644
            return info
        for name in ("blobs", "blobs/sha256"):
            out.addfile(member(name, 0, tarfile.DIRTYPE))
        for name in sorted([*layers, *new]):
            if name in new:
                out.addfile(member(name, len(new[name])), io.BytesIO(new[name]))
            else:
                out.addfile(member(name, tar.getmember(name).size), tar.extractfile(name))
PY
rm -f "$out.podman"

# --- the image is the release it is tagged as: the archive, loaded, runs as this code's version ---------------------
"${PODMAN[@]}" rmi --force "$TAG" >/dev/null 2>&1 || true
"${PODMAN[@]}" load --quiet -i "$out.partial" >/dev/null || die "podman load of the archive failed"
run=("${PODMAN[@]}" run --rm --network=none --user 65532 --read-only "$TAG")
said=$("${run[@]}" python -m automation --version) || die "the image's python -m automation --version failed"
[ "$said" = "hubwright $VERSION" ] || die "the image says '$said', stacks.release.version() is $VERSION: not written"
in_cli=$("${run[@]}" pulumi version) || die "the image's pulumi version failed"
[ "$in_cli" = "v$PULUMI_VERSION" ] || die "the image's pulumi is $in_cli, not v$PULUMI_VERSION"
say "checked: '$said', pulumi $in_cli [$(( $(date +%s) - t ))s]"
mv -f "$out.partial" "$out"
size=$("${PODMAN[@]}" image inspect --format '{{.Size}}' "$TAG")
say "wrote $out: $TAG, image $((size / 1000000)) MB, archive $(( $(stat -c %s "$out") / 1000000 )) MB, in $(( $(date +%s) - t0 ))s"
say "(podman storage: $store; load elsewhere with: podman load -i $out)"
