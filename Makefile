# The two entry points the README documents.
.PHONY: serve test lint

serve:
	scripts/setup.sh
	.venv/bin/chattts-stream serve $(ARGS)

test:
	scripts/setup.sh --test
	.venv/bin/python -m pytest $(ARGS)

lint:
	.venv/bin/ruff check streaming server client harness tests bench
	.venv/bin/mypy
