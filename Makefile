# Shortcuts for ./dev, which holds the README's commands, and the image build.
.PHONY: plan setup test image

plan:
	./dev plan

setup:
	./dev setup

test:
	./dev test

# The image, labelled and tagged with the one version (pyproject.toml, read by stacks.release): VERSION and IMAGE
# come from stacks.release.version() and default_image() (override IMAGE to push elsewhere, e.g. a mirror).
# PULUMI_AWS_SHA256: the AWS plugin archive's SHA-256 from its release's checksums file (the Dockerfile says why).
PYTHON ?= .venv/bin/python
VERSION = $(shell $(PYTHON) -c 'from stacks.release import version; print(version())')
IMAGE ?= $(shell $(PYTHON) -c 'from stacks.release import default_image; print(default_image())')
DOCKER ?= docker

image:
	$(DOCKER) build --build-arg VERSION=$(VERSION) --build-arg PULUMI_AWS_SHA256=$(PULUMI_AWS_SHA256) -t $(IMAGE) .
