# The two commands of the README, and their parts. Each creates or reuses .venv itself.
.PHONY: plan test venv tools

plan: venv  ## the main job on the bundled examples, no cloud account needed
	.venv/bin/python -m automation plan --hub examples/hub.yaml --clusters examples/clusters --format tree

test: venv tools  ## the whole suite, real engines included (tools are built once, then cached)
	PATH="$(CURDIR)/.tools/bin:$$PATH" .venv/bin/pytest -q

venv:
	@bash scripts/venv.sh

tools:
	@bash scripts/tools.sh
