# Two commands for a fresh clone: `make demo` and `make test`. Each creates .venv if missing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo demo-real test test-real test-generated bench proofs docs install clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# Reinstall when the dependency list or the constraints change.
$(STAMP): $(BIN)/python pyproject.toml constraints.txt
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[plugin,test,notebooks]'
	touch $(STAMP)

install: $(STAMP)

# pytest-xdist workers (one per core); `make test PYTEST_WORKERS=0` runs in one process, e.g. to debug a test.
PYTEST_WORKERS ?= auto
PARALLEL := -n $(PYTEST_WORKERS) --dist loadgroup

demo: $(STAMP)
	$(BIN)/aggsim demo

demo-real: $(STAMP)
	$(BIN)/aggsim demo --real

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q $(PARALLEL) --durations=20

# The full real-process conformance set (several minutes on 2 cores); installs libfaketime first if missing.
test-real: $(STAMP)
	bash .ci/system-packages
	$(BIN)/python -m pytest -q -s $(PARALLEL) -m "slow or race or generated" --durations=15

# The seeded sample of generated scenarios on real pods alone (AGGSIM_SAMPLE_SEED picks another sample); its files
# stay under build/generated until the next run.
test-generated: $(STAMP)
	bash .ci/system-packages
	$(BIN)/python -m pytest -q -s -m generated --basetemp=build/generated

# Benchmarks: figures are written into README.md.
bench: $(STAMP)
	$(BIN)/python benchmarks/bench_explain.py --write-readme
	$(BIN)/python benchmarks/bench_simulate.py --write-readme
	$(BIN)/python benchmarks/bench_prove.py --write-readme

# The README's table of proofs (`aggsim prove` on each plugin x aggregation flag): proved again and rewritten.
proofs: $(STAMP)
	$(BIN)/python -m aggregation.proof_report README.md

# The design-review notebook, executed, as one self-contained HTML file (figures inlined).
DOCS_DIR ?= docs
docs: $(STAMP)
	$(BIN)/python -m nbconvert --execute --to html --output-dir $(DOCS_DIR) --output design-review \
		notebooks/design_review.ipynb

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
