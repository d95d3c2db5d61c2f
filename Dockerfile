# The clusternet service image used by deploy/. (Not built in CI: this machine has no Docker engine.)
FROM python:3.11-slim
ARG PULUMI_VERSION=3.259.0
RUN apt-get update && apt-get install -y --no-install-recommends curl ca-certificates \
 && curl -fsSL https://get.pulumi.com | sh -s -- --version "${PULUMI_VERSION}" \
 && mv /root/.pulumi/bin/* /usr/local/bin/ && apt-get purge -y curl && rm -rf /var/lib/apt/lists/* /root/.pulumi
WORKDIR /app
COPY requirements.txt .
RUN pip install --no-cache-dir -r requirements.txt \
 && PULUMI_HOME=/opt/pulumi pulumi plugin install resource aws "$(pip show pulumi-aws | sed -n 's/^Version: //p')"
COPY Pulumi.yaml __main__.py ./
COPY stacks stacks
COPY components components
COPY automation automation
ENV PULUMI_HOME=/opt/pulumi PULUMI_SKIP_UPDATE_CHECK=true
USER 65532
ENTRYPOINT []
