# The hubwright service image for a machine with Docker: the same recipe as scripts/image.sh (which builds it
# without Docker, from Debian's packages with mmdebstrap, and is what CI builds and runs: tests/test_image_live.py),
# on python:3.11-slim by digest instead. Same contents at the same paths, same ENV, USER, ENTRYPOINT and labels
# (tests/test_dockerfile.py holds the two to it); the image of a release is scripts/image.sh's.
#   make image PULUMI_AWS_SHA256=<sha256 of the AWS plugin's archive, from its release>
#
# Not built here: this machine has no Docker engine and cannot pull base images or reach GitHub's release downloads.
# tests/test_dockerfile.py checks what can be checked without them: every COPY source exists and the code's imports
# and the files it reads at run time are copied; the one download is verified against a pinned SHA-256 before use
# (that step run there on local files: a right sum passes, a wrong one fails the build); the version check and the
# labels; PULUMI_HOME, USER and ENTRYPOINT. tests/test_deploy_live.py runs the service from these paths in a sandbox
# built from this file and the rendered Deployment.
#
# The pod runs it as uid 65532 with a read-only root filesystem (components/controlplane.py): nothing in the image
# is written at run time.
#
# BASE_IMAGE: python:3.11-slim by digest, so a rebuild gets the same base. The default is a digest of that tag
# published and used by other projects (not pulled here); to move to the newest, read it with
# `docker buildx imagetools inspect python:3.11-slim` and pass --build-arg BASE_IMAGE=python:3.11-slim@sha256:...
ARG BASE_IMAGE=python:3.11-slim@sha256:9c900dea9e8fb7e16277c179b555cc72d29a352dbc33cff48ad5a0412fd5bfc7
FROM ${BASE_IMAGE}
ARG BASE_IMAGE
# VERSION: pyproject.toml's, passed by `make image`; the build fails below unless it is the code's own.
ARG VERSION=""
# The pulumi CLI is not a download: it is the one scripts/tools.sh builds from its Go module (.tools/bin), at
# requirements.txt's pulumi version (checked below, and by tests/test_dockerfile.py). This image is linux/amd64.
ARG PULUMI_VERSION=3.259.0
# The AWS provider plugin is an input: requirements.txt's pulumi-aws, from its GitHub release, verified against
# PULUMI_AWS_SHA256 (the checksums file on that release, the line for
# pulumi-resource-aws-v${PULUMI_AWS_VERSION}-linux-amd64.tar.gz; it could not be read here, so no default).
# Empty: the image is built without the plugin, its label io.hubwright.aws-plugin.sha256 says "none", it is to be
# tagged <version>-noplugin (stacks.release.image_tag), and its `serve` reports not ready (automation/adapters/engine/
# plugins.py). PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION (below): the first `up` never fetches it unverified.
ARG PULUMI_AWS_VERSION=7.51.1
ARG PULUMI_AWS_SHA256=""
LABEL org.opencontainers.image.title="hubwright" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/hubwright/hubwright" \
      org.opencontainers.image.base.name="${BASE_IMAGE}" \
      io.hubwright.aws-plugin.sha256="${PULUMI_AWS_SHA256:-none}"
# apt's packages are verified by apt itself (signed repositories).
# openssh-client: ssh-keyscan, which reads a Git forge's SSH host keys for the registry's repositories.
RUN apt-get update && apt-get install -y --no-install-recommends curl ca-certificates tini openssh-client
# The one download lands in a file that is checked (sha256sum -c) before anything reads it; without a sum, none.
RUN { test -n "${PULUMI_AWS_SHA256}" || { echo "PULUMI_AWS_SHA256 is empty: no AWS provider plugin in this image (tag it <version>-noplugin)" >&2; exit 0; }; } \
 && mkdir /tmp/downloads && cd /tmp/downloads \
 && curl -fsSLo pulumi-resource-aws.tar.gz "https://github.com/pulumi/pulumi-aws/releases/download/v${PULUMI_AWS_VERSION}/pulumi-resource-aws-v${PULUMI_AWS_VERSION}-linux-amd64.tar.gz" \
 && echo "${PULUMI_AWS_SHA256}  pulumi-resource-aws.tar.gz" | sha256sum -c - \
 && tar -xzf pulumi-resource-aws.tar.gz -C /usr/local/bin pulumi-resource-aws \
 && cd / && rm -rf /tmp/downloads
# What the build put in, where `serve` reads it (stacks.release.IMAGE_AWS_PLUGIN): the plugin's sum, or none.
RUN mkdir -p /usr/local/share/hubwright && echo "${PULUMI_AWS_SHA256:-none}" > /usr/local/share/hubwright/aws-plugin.sha256 \
 && apt-get purge -y curl && apt-get autoremove -y && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY requirements.txt .
# pip's downloads are pinned by version (requirements.txt) and come over TLS from PyPI; they are not yet pinned by
# hash (that needs a lock file with every wheel's sum, `pip install --require-hashes`).
RUN pip install --no-cache-dir -r requirements.txt
# The provider plugins are on PATH (/usr/local/bin, above), where Pulumi finds `pulumi-resource-<name>` binaries:
# PULUMI_HOME is an empty volume at run time (below), so a plugin installed into it at build time would not be seen.
# pyproject.toml holds the version stacks.release reads at run time; LICENSE travels with every copy of the code.
COPY pyproject.toml LICENSE Pulumi.yaml __main__.py ./
COPY stacks stacks
COPY components components
COPY automation automation
# The policy pack every update runs (HUBWRIGHT_POLICY), and the script the CLI starts it with.
COPY policy policy
COPY scripts/pulumi-analyzer-policy-python /usr/local/bin/
# The pulumi CLI and the Python helpers scripts/tools.sh places beside it (dynamic providers, the language host).
COPY .tools/bin/pulumi .tools/bin/pulumi-resource-pulumi-python .tools/bin/pulumi-language-python-exec /usr/local/bin/
RUN test "$(pulumi version)" = "v${PULUMI_VERSION}" || { echo "the pulumi CLI in .tools/bin is not ${PULUMI_VERSION}: run scripts/tools.sh" >&2; exit 1; }
# The image is the release it is labelled as: the code's own version (and every import it needs) or no image.
RUN test "$(python -m automation --version)" = "hubwright ${VERSION}" || { echo "VERSION=${VERSION} is not this code's version (pyproject.toml): build with make image" >&2; exit 1; }
# PULUMI_HOME (workspace settings, plugin cache) must be writable: the Deployment mounts an emptyDir there
# (components/controlplane.py PULUMI_HOME) and sets the same variable.
# USER: uid 65532 has no /etc/passwd entry, and the pulumi CLI (Go's user.Current, which names a stack lock's
# owner) then needs $USER, or every `pulumi stack init` fails with "user: Current requires cgo or $USER set".
# PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION: a plugin not in the image is never downloaded (unverified) at run time.
ENV PULUMI_HOME=/var/cache/pulumi PULUMI_SKIP_UPDATE_CHECK=true USER=hubwright \
    PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION=true
USER 65532
# tini is PID 1: it reaps what a killed run leaves (the service kills a timed-out run's whole tree, whose
# orphans would otherwise be re-parented to a PID-1 Python that never waits for them), and passes SIGTERM on.
ENTRYPOINT ["/usr/bin/tini", "--"]
