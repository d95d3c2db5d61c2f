# Shortcuts for ./dev, which holds the README's two commands.
.PHONY: plan test

plan:
	./dev plan

test:
	./dev test
