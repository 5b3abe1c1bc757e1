# The commands users type. Everything installs itself into .venv on first use.
#   make lab      set up (first time) and open JupyterLab on notebooks/
#   make test     set up (first time) and run every test: authoring check, lint, unit, strict nbval
#                 (default strategy here; then test-colab and test-colab-tpu)
#   make nbval    strict nbval on this stack: default strategy, then mirrored x2 with the floats shaken
#   make test-colab  every notebook on Colab's versions (requirements-colab.txt), in .venv-colab,
#                 mirrored x2 with the floats shaken
#   make test-colab-tpu  notebook 11 on Colab's TPU runtime's versions, no TensorFlow, in .venv-colab-tpu
#   make grade SUBMISSIONS="path ..." OUT=grades
#   make slides   reveal.js decks of every master (with outputs) in build/slides/
#   make demo NB=03   run notebook 03's demo path (cells tagged `demo`) in a fresh kernel, timed
#   make timings  every master at full size (no COURSE_FAST, 2 replicas), every cell timed: run it on
#                 a quiet machine; build/timings.json keeps the numbers
# NB=03 limits outputs and nbval to the notebooks whose names start with 03.

PYTHON_SYSTEM ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Installs with uv (pinned in requirements.txt, installed by pip): same versions as pip resolves, in
# a fraction of pip's 155 s. --compile-bytecode, as pip does: where PYTHONDONTWRITEBYTECODE is set,
# a package installed without .pyc files is compiled again in every process that imports it
# (measured: the unit tests took 2134 s instead of about 1470).
UV := $(VENV)/bin/uv pip install -q --compile-bytecode
# Tests and reference outputs use the built-in data, never a cache of the machine they run on.
# COURSE_STRICT_PINS=1: on the pinned stack, notebook 02's support matrix raises where it differs
# from the outcomes recorded for the pins (a student's run only lists the rows that differ).
TEST_ENV := COURSE_FAST=1 COURSE_OFFLINE=1 COURSE_STRICT_PINS=1 KERAS_HOME=$(CURDIR)/.cache/keras-test
NBVAL := $(PY) -m pytest --nbval --nbval-sanitize-with tests/nbval_sanitize.cfg \
         --nbval-cell-timeout=600 --durations=0 -p no:cacheprovider \
         $(if $(NB),$(wildcard solutions/$(NB)*.ipynb),solutions)
# Strict nbval as the tests run it: one notebook per core at a time (pytest-xdist; a notebook's
# cells run in order in its own kernel). A kernel keeps about one core busy, so two at a time on two
# cores take 0.6 of the time (measured: 621 s one at a time, 384 s two at a time). Notebook 09 runs
# beside another one too: its timing cells' outputs are not compared (nbval-ignore-output) and its
# asserts compare runs interleaved in one kernel, which a neighbour slows alike.
# $(call nbval_pass,ENV,PYTHON,SANITIZER FILE)
# In name order. (Slowest first, 03 07 10 04 ..., took 549 s in a timed CI run against 499 s in name
# order the day before: no gain seen, so the order stays.)
MASTERS := $(sort $(if $(NB),$(wildcard solutions/$(NB)*.ipynb),$(wildcard solutions/*.ipynb)))
nbval_pass = $(1) $(2) -m pytest --nbval --nbval-sanitize-with $(3) --nbval-cell-timeout=600 \
             --durations=0 -p no:cacheprovider -n auto --dist loadfile $(MASTERS)

.PHONY: setup lab test test-colab test-colab-tpu lint unit nbval nbval-default nbval-mirrored nbval-default-shaken nbval-mirrored-shaken nbval-all notebooks check outputs grade bench slides demo timings clean

setup: $(STAMP)

$(STAMP): requirements.txt pyproject.toml
	@test -n "$(PYTHON_SYSTEM)" || (echo "Python 3.11 is needed (python3.11 or python3 on PATH)"; exit 1)
	@test -x $(PY) || $(PYTHON_SYSTEM) -m venv $(VENV)
	$(PY) -m pip install -q "$$(grep -m1 '^uv==' requirements.txt)"
	$(UV) --python $(PY) -r requirements.txt
	$(UV) --python $(PY) --no-deps -e .
	@touch $(STAMP)

lab: setup
	$(VENV)/bin/jupyter lab $(if $(filter 0,$(shell id -u)),--allow-root) notebooks/

notebooks: setup
	$(PY) -m course_tools.authoring build

check: setup
	$(PY) -m course_tools.authoring check

outputs: setup
	$(TEST_ENV) $(PY) -m course_tools.authoring outputs $(NB)

lint: setup
	$(VENV)/bin/ruff check course_utils course_tools tests
	$(VENV)/bin/ruff format --check course_utils course_tools tests
	$(VENV)/bin/mypy

# On every core (pytest-xdist), one test file per worker at a time, so that a file's
# module-scoped fixtures (the graded class) are built once. (Spreading the notebook-running files'
# tests over both workers with --dist loadgroup built the graded class twice, 117 s more.)
unit: setup
	$(TEST_ENV) $(PY) -m pytest -p no:cacheprovider -n auto --dist loadfile --durations=30 tests

nbval-default: setup
	$(call nbval_pass,$(TEST_ENV) COURSE_STRATEGY=default,$(PY),tests/nbval_sanitize.cfg)

nbval-mirrored: setup
	$(call nbval_pass,$(TEST_ENV) COURSE_STRATEGY=mirrored COURSE_REPLICAS=2,$(PY),tests/nbval_sanitize.cfg)

# Float rounding differs between CPUs (vector units, oneDNN's kernels, thread counts): a stored number
# at float-noise level that holds here fails on the next machine. So strict nbval also runs with the
# floats shaken, as another CPU shakes them: TensorFlow's matrix products (oneDNN's
# kernels, also under Eigen) held to SSE4.1's narrower vectors, oneDNN's graph rewrites off (on by
# default on newer Intel CPUs) and one thread per operation. Measured on an AVX2 CPU: a check's
# mismatch of 1.02e-8 reads 9.6e-9 shaken, while TF_ENABLE_ONEDNN_OPTS=0 alone changed nothing there.
# It moves the digits, not always across a printed rounding step: tests/test_stored_outputs.py,
# which refuses a stored noise-level number, is the main guard.
SHAKEN := ONEDNN_MAX_CPU_ISA=SSE41 TF_ENABLE_ONEDNN_OPTS=0 TF_NUM_INTRAOP_THREADS=1

nbval-default-shaken: setup
	$(call nbval_pass,$(TEST_ENV) $(SHAKEN) COURSE_STRATEGY=default,$(PY),tests/nbval_sanitize.cfg)

nbval-mirrored-shaken: setup
	$(call nbval_pass,$(TEST_ENV) $(SHAKEN) COURSE_STRATEGY=mirrored COURSE_REPLICAS=2,$(PY),tests/nbval_sanitize.cfg)

# `make nbval` crosses them in two passes on this stack: the default strategy with TensorFlow's own
# floats, mirrored x2 with the floats shaken. The other two pairs run only in `make nbval-all`.
nbval: nbval-default nbval-mirrored-shaken

nbval-all: nbval-default nbval-mirrored nbval-default-shaken nbval-mirrored-shaken

# `make test` (and CI) crosses strategy, floats and stack in two full passes: the default strategy
# with TensorFlow's own floats on the course's stack, mirrored x2 with the floats shaken on Colab's
# (test-colab); then notebook 11 on Colab's TPU stack. A third full pass would add 7 minutes to a
# run that must stay under 45 on two cores; `make nbval` runs mirrored x2 shaken on this stack too.
test: check lint unit nbval-default test-colab test-colab-tpu

# Colab's stack (requirements-colab.txt) in its own environment: every master on 2 replicas
# (mirrored x2) with the floats shaken, compared with its stored outputs after the same sanitizers,
# version numbers masked.
COLAB_VENV := .venv-colab
COLAB_STAMP := $(COLAB_VENV)/.installed

# Colab runs Python 3.13: use it where this machine has a working python3.13, else the set-up's Python.
COLAB_PYTHON ?= $(shell python3.13 -c 'import sys; print(sys.executable)' 2>/dev/null || echo $(PYTHON_SYSTEM))

$(COLAB_STAMP): requirements-colab.txt pyproject.toml $(STAMP)
	@test -x $(COLAB_VENV)/bin/python || $(COLAB_PYTHON) -m venv $(COLAB_VENV)
	$(UV) --python $(COLAB_VENV)/bin/python -r requirements-colab.txt
	$(UV) --python $(COLAB_VENV)/bin/python --no-deps -e .
	@touch $(COLAB_STAMP)

test-colab: $(COLAB_STAMP)
	@mkdir -p .cache
	cat tests/nbval_sanitize.cfg tests/nbval_sanitize_colab.cfg > .cache/nbval_sanitize_colab.cfg
	$(call nbval_pass,$(TEST_ENV) $(SHAKEN) COURSE_STRATEGY=mirrored COURSE_REPLICAS=2,$(COLAB_VENV)/bin/python,.cache/nbval_sanitize_colab.cfg)

# Colab's TPU runtime (requirements-colab-tpu.txt: Keras on JAX, no TensorFlow; CPU JAX in place
# of libtpu) in its own environment, for the notebook written for it: notebook 11's master under
# strict nbval (version numbers masked), then its student copy run with every exercise blank,
# each check giving its one-line hint (tests/test_exercises.py).
COLAB_TPU_VENV := .venv-colab-tpu
COLAB_TPU_STAMP := $(COLAB_TPU_VENV)/.installed
COLAB_TPU_NB := 11_keras_distribution_on_jax

$(COLAB_TPU_STAMP): requirements-colab-tpu.txt pyproject.toml $(STAMP)
	@test -x $(COLAB_TPU_VENV)/bin/python || $(COLAB_PYTHON) -m venv $(COLAB_TPU_VENV)
	$(UV) --python $(COLAB_TPU_VENV)/bin/python -r requirements-colab-tpu.txt
	$(UV) --python $(COLAB_TPU_VENV)/bin/python --no-deps -e .
	@touch $(COLAB_TPU_STAMP)

test-colab-tpu: $(COLAB_TPU_STAMP)
	@mkdir -p .cache
	@$(COLAB_TPU_VENV)/bin/python -c "import importlib.util as u, sys; sys.exit(u.find_spec('tensorflow') \
	    and 'TensorFlow is installed in $(COLAB_TPU_VENV); the TPU runtime has none')"
	cat tests/nbval_sanitize.cfg tests/nbval_sanitize_colab.cfg > .cache/nbval_sanitize_colab_tpu.cfg
	$(TEST_ENV) $(COLAB_TPU_VENV)/bin/python -m pytest --nbval \
	    --nbval-sanitize-with .cache/nbval_sanitize_colab_tpu.cfg --nbval-cell-timeout=600 --durations=0 \
	    -p no:cacheprovider solutions/$(COLAB_TPU_NB).ipynb
	$(TEST_ENV) $(COLAB_TPU_VENV)/bin/python -m pytest -p no:cacheprovider --student-copy $(COLAB_TPU_NB) \
	    tests/test_exercises.py::test_student_copy_run_whole_gives_one_line_hints

# Every master under strict nbval on this machine's GPUs, COURSE_STRATEGY=auto (one GPU is split
# into 2 logical GPUs, several are used as they are), with the sanitizers of `make test`; then one
# line per notebook naming the cells that differ. Refuses in one line where TensorFlow sees no GPU.
# Untested so far: no GPU with TensorFlow has run it (notebook 11 on JAX has: docs/instructors.md).
GPU_REPORT := .cache/nbval-gpu.xml
.PHONY: test-gpu

test-gpu: setup
	@$(PY) -m course_tools.nbval_summary --require-gpu
	@mkdir -p .cache
	@status=0; env -u COURSE_REPLICAS $(TEST_ENV) COURSE_STRATEGY=auto $(NBVAL) -rf \
	    --junitxml=$(GPU_REPORT) || status=$$?; \
	$(PY) -m course_tools.nbval_summary $(GPU_REPORT); exit $$status

grade: setup
	$(PY) -m course_tools.grade $(SUBMISSIONS) --out $(or $(OUT),grades)

slides: setup
	$(PY) -m course_tools.presenting slides $(NB)

demo: setup
	@test -n "$(NB)" || (echo "Name the notebook: make demo NB=03"; exit 2)
	$(TEST_ENV) $(PY) -m course_tools.presenting demo $(NB)

timings: setup
	COURSE_OFFLINE=1 KERAS_HOME=$(CURDIR)/.cache/keras-test $(PY) -m course_tools.presenting full $(NB) --json build/timings.json --keep build/full

bench: setup
	$(PY) -m course_tools.bench

clean:
	rm -rf solutions/scratch notebooks/scratch .cache/keras-test .cache/nbval_sanitize_colab.cfg \
	    .cache/nbval_sanitize_colab_tpu.cfg
