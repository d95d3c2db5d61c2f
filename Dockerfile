# The hubwright service image, used by deploy/ and by every facts agent (ghcr.io/hubwright/hubwright:<version>).
# Build it with `make image`, which passes VERSION from pyproject.toml (stacks.release.version()) and tags it with
# stacks.release.default_image():
#   make image PULUMI_AWS_SHA256=<sha256 of the AWS plugin's archive, from its release>
#
# Not built in CI: this machine has no Docker engine, cannot pull base images and cannot reach GitHub's release
# downloads. tests/test_dockerfile.py checks what can be checked without them: every COPY source exists and the
# code's imports and the files it reads at run time are copied; every download is verified against a pinned SHA-256
# before use (the verification step itself is run there on local files: a right sum passes, a wrong or missing one
# fails the build); the version check and the labels; PULUMI_HOME, USER and ENTRYPOINT. tests/test_deploy_live.py
# runs the service from these paths in a sandbox built from this file and the rendered Deployment.
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
# The pulumi CLI: its release archive, verified against the SHA-256 that pulumi-${PULUMI_VERSION}-checksums.txt (beside
# the archives on the release) lists for pulumi-v${PULUMI_VERSION}-linux-x64.tar.gz. The CLI matches requirements.txt's
# pulumi SDK (tests/test_dockerfile.py checks it). The archives are per architecture: this image is linux/amd64.
# The pinned sum was not read from the checksums file here (no network): it is the one a public Nix pin of the same
# archive records (get.pulumi.com serves the release's files). A wrong pin fails the build; never an unverified CLI.
# When bumping, take the new one from the release's checksums file.
ARG PULUMI_VERSION=3.259.0
ARG PULUMI_SHA256=94ba357acac23d01474084c4b00098dc0f7bc70ce13f34c777459254a5f718e5
# The AWS provider plugin: requirements.txt's pulumi-aws, from its GitHub release. PULUMI_AWS_SHA256 has no default
# (it could not be read here): set it from the checksums file on that release, the line for
# pulumi-resource-aws-v${PULUMI_AWS_VERSION}-linux-amd64.tar.gz. Empty, the build fails: no unverified plugin.
ARG PULUMI_AWS_VERSION=7.51.1
ARG PULUMI_AWS_SHA256=""
LABEL org.opencontainers.image.title="hubwright" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/hubwright/hubwright" \
      org.opencontainers.image.base.name="${BASE_IMAGE}"
# Every download lands in a file that is checked (sha256sum -c) before anything reads it; apt's packages are
# verified by apt itself (signed repositories).
# openssh-client: ssh-keyscan, which reads a Git forge's SSH host keys for the registry's repositories.
RUN apt-get update && apt-get install -y --no-install-recommends curl ca-certificates tini openssh-client \
 && mkdir /tmp/downloads && cd /tmp/downloads \
 && curl -fsSLo pulumi.tar.gz "https://github.com/pulumi/pulumi/releases/download/v${PULUMI_VERSION}/pulumi-v${PULUMI_VERSION}-linux-x64.tar.gz" \
 && { test -n "${PULUMI_SHA256}" || { echo "PULUMI_SHA256 is empty: set it from pulumi-${PULUMI_VERSION}-checksums.txt" >&2; exit 1; }; } && echo "${PULUMI_SHA256}  pulumi.tar.gz" | sha256sum -c - \
 && tar -xzf pulumi.tar.gz --strip-components=1 -C /usr/local/bin \
 && curl -fsSLo pulumi-resource-aws.tar.gz "https://github.com/pulumi/pulumi-aws/releases/download/v${PULUMI_AWS_VERSION}/pulumi-resource-aws-v${PULUMI_AWS_VERSION}-linux-amd64.tar.gz" \
 && { test -n "${PULUMI_AWS_SHA256}" || { echo "PULUMI_AWS_SHA256 is empty: set it from pulumi-aws ${PULUMI_AWS_VERSION}'s checksums file" >&2; exit 1; }; } && echo "${PULUMI_AWS_SHA256}  pulumi-resource-aws.tar.gz" | sha256sum -c - \
 && tar -xzf pulumi-resource-aws.tar.gz -C /usr/local/bin pulumi-resource-aws \
 && cd / && rm -rf /tmp/downloads && apt-get purge -y curl && apt-get autoremove -y && rm -rf /var/lib/apt/lists/*
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
# The image is the release it is labelled as: the code's own version (and every import it needs) or no image.
RUN test "$(python -m automation --version)" = "hubwright ${VERSION}" || { echo "VERSION=${VERSION} is not this code's version (pyproject.toml): build with make image" >&2; exit 1; }
# PULUMI_HOME (workspace settings, plugin cache) must be writable: the Deployment mounts an emptyDir there
# (components/controlplane.py PULUMI_HOME) and sets the same variable.
# USER: uid 65532 has no /etc/passwd entry, and the pulumi CLI (Go's user.Current, which names a stack lock's
# owner) then needs $USER, or every `pulumi stack init` fails with "user: Current requires cgo or $USER set".
ENV PULUMI_HOME=/var/cache/pulumi PULUMI_SKIP_UPDATE_CHECK=true USER=hubwright
USER 65532
# tini is PID 1: it reaps what a killed run leaves (the service kills a timed-out run's whole tree, whose
# orphans would otherwise be re-parented to a PID-1 Python that never waits for them), and passes SIGTERM on.
ENTRYPOINT ["/usr/bin/tini", "--"]
