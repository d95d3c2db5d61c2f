# Shortcuts for ./dev, which holds the README's commands, and the image build.
.PHONY: plan setup test image release

plan:
	./dev plan

setup:
	./dev setup

test:
	./dev test

# The image, labelled and tagged with the one version (pyproject.toml, read by stacks.release): VERSION and IMAGE
# come from stacks.release.version() and image_tag() (<version>-noplugin without PULUMI_AWS_SHA256; override IMAGE to
# push elsewhere, e.g. a mirror).
# PULUMI_AWS_SHA256: the AWS plugin archive's SHA-256 from its release's checksums file (the Dockerfile says why).
PYTHON ?= .venv/bin/python
VERSION = $(shell $(PYTHON) -c 'from stacks.release import version; print(version())')
IMAGE ?= $(shell $(PYTHON) -c 'from stacks.release import image_tag; print(image_tag(with_plugin=bool("$(PULUMI_AWS_SHA256)")))')
DOCKER ?= docker

image:
	$(DOCKER) build --build-arg VERSION=$(VERSION) --build-arg PULUMI_AWS_SHA256=$(PULUMI_AWS_SHA256) -t $(IMAGE) .

# The release into $(DIST) (default dist/) with SHA256SUMS over every file: the image (OCI archive) and its SBOM, the
# Helm chart, install.yaml and the kustomize base, the CLI as one file, the IAM templates (scripts/release.sh says
# what each is). VERSION, given on the command line, must be the code's own or nothing is built.
# PULUMI_AWS_PLUGIN and PULUMI_AWS_SHA256: the AWS provider plugin (a path or an https URL) and its SHA-256; without
# them the image is hubwright-<version>-noplugin.oci.tar (scripts/image.sh).
DIST ?= dist
PULUMI_AWS_PLUGIN ?=
release:
	bash scripts/release.sh --version "$(VERSION)" --dist "$(DIST)" \
	  $(if $(PULUMI_AWS_PLUGIN),--aws-plugin "$(PULUMI_AWS_PLUGIN)" --aws-plugin-sha256 "$(PULUMI_AWS_SHA256)")
