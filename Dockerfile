# The hubwright service image used by deploy/. (Not built in CI: this machine has no Docker engine.)
# The pod runs it as uid 65532 with a read-only root filesystem (components/controlplane.py): nothing in the image
# is written at run time. tests/test_dockerfile.py checks the COPY lines and PULUMI_HOME; tests/test_deploy_live.py
# runs the service from these paths in a sandbox built from this file and the rendered Deployment.
FROM python:3.11-slim
ARG PULUMI_VERSION=3.259.0
RUN apt-get update && apt-get install -y --no-install-recommends curl ca-certificates tini \
 && curl -fsSL https://get.pulumi.com | sh -s -- --version "${PULUMI_VERSION}" \
 && mv /root/.pulumi/bin/* /usr/local/bin/ && apt-get purge -y curl && rm -rf /var/lib/apt/lists/* /root/.pulumi
WORKDIR /app
COPY requirements.txt .
# The aws provider plugin goes on PATH, where Pulumi finds `pulumi-resource-<name>` binaries: PULUMI_HOME is an
# empty volume at run time (below), so a plugin installed into it at build time would not be seen.
RUN pip install --no-cache-dir -r requirements.txt \
 && export PULUMI_HOME=/tmp/pulumi-build \
 && pulumi plugin install resource aws "$(pip show pulumi-aws | sed -n 's/^Version: //p')" \
 && mv /tmp/pulumi-build/plugins/resource-aws-v*/pulumi-resource-aws /usr/local/bin/ && rm -rf /tmp/pulumi-build
COPY Pulumi.yaml __main__.py ./
COPY stacks stacks
COPY components components
COPY automation automation
# The policy pack every update runs (HUBWRIGHT_POLICY), and the script the CLI starts it with.
COPY policy policy
COPY scripts/pulumi-analyzer-policy-python /usr/local/bin/
# PULUMI_HOME (workspace settings, plugin cache) must be writable: the Deployment mounts an emptyDir there
# (components/controlplane.py PULUMI_HOME) and sets the same variable.
# USER: uid 65532 has no /etc/passwd entry, and the pulumi CLI (Go's user.Current, which names a stack lock's
# owner) then needs $USER, or every `pulumi stack init` fails with "user: Current requires cgo or $USER set".
ENV PULUMI_HOME=/var/cache/pulumi PULUMI_SKIP_UPDATE_CHECK=true USER=hubwright
USER 65532
# tini is PID 1: it reaps what a killed run leaves (the service kills a timed-out run's whole tree, whose
# orphans would otherwise be re-parented to a PID-1 Python that never waits for them), and passes SIGTERM on.
ENTRYPOINT ["/usr/bin/tini", "--"]
