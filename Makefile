# bakeoff — `make help` lists the targets.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed
# dataset-fashion-mnist: Fashion-MNIST offline; libtcmalloc-minimal4: the replicas' malloc (components/backends/allocator.py)
SYSTEM_PACKAGES := dataset-fashion-mnist libtcmalloc-minimal4
# chromium: tests/test_report.py renders the run report in a headless browser (only `make test` needs it);
# buildah, mmdebstrap: `make image` without a docker engine or a registry (images/build.sh, tests/test_image.py)
TEST_PACKAGES := chromium buildah mmdebstrap
# mariadb-server: the KFP API server's database in the kfp lane (tests/kfp/mariadb.py)
KFP_PACKAGES := mariadb-server
export TF_CPP_MIN_LOG_LEVEL ?= 2

IMAGE_CACHE := $(or $(BAKEOFF_IMAGE_CACHE),$(HOME)/.cache/bakeoff/image)
IMAGE ?= $(shell sed -n 's/^IMAGE = "\([^"]*\)".*/\1/p' components/defaults.py)

.PHONY: help run test test-fast test-cluster test-kfp kfp-binaries kfp-system lint typecheck format bench install system test-system compile image clean cluster cluster-down cluster-binaries

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

# Silent, its words on stderr: `make run ARGS=--json > out.json` is JSON even on the first run.
$(INSTALLED): pyproject.toml
	@echo "installing bakeoff into $(VENV) (once, and after pyproject.toml changes)" >&2
	@$(PYTHON) -m venv $(VENV) >&2
	@$(BIN)/pip install --quiet --upgrade pip >&2
	@$(BIN)/pip install --quiet -e '.[dev,bench]' >&2
	@touch $@

install: $(INSTALLED) ## create .venv and install bakeoff with its dev dependencies

# $(call apt_install,PACKAGES): installs those of the Debian PACKAGES that are missing (as root, or through sudo).
define apt_install
	@missing="$$(for p in $(1); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done)"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; elif command -v sudo >/dev/null; then SUDO=sudo; \
	  else echo "missing Debian packages: run 'apt-get install" $$missing"' as root" >&2; exit 1; fi; \
	  $$SUDO apt-get update -qq >&2 && $$SUDO apt-get install -y -qq $$missing >&2; \
	fi
endef

system: ## install the Debian packages bakeoff uses when missing: offline Fashion-MNIST, tcmalloc for the replicas
	$(call apt_install,$(SYSTEM_PACKAGES))

test-system: ## install the Debian packages only the tests use when missing: chromium (the report), buildah and mmdebstrap (the image)
	$(call apt_install,$(TEST_PACKAGES))

run: $(INSTALLED) system ## run the default bake-off locally (ARGS="--max-train-examples 6000" passes flags)
	@$(BIN)/bakeoff run $(ARGS)

# the unit lane alone: a test also in a heavier lane (pyproject.toml's markers) runs there
FAST := unit and not (s3 or training or serving or cluster or kfp)
# The kfp lane runs where a kubeflow/pipelines checkout is (tests/kfp/sources.py): exit 3 and one line where none is.
KFP_SOURCES := $(BIN)/python -m tests.kfp.sources >/dev/null
KFP_LANE = $(BIN)/pytest -m kfp tests/kfp tests/test_kfp_client.py $(PYTEST_ARGS)

# The unit lane first, one process per core as in test-fast; then the heavier lanes one test at a time (their runs
# time themselves and take other processes for contention), the cluster lane running every pod from the image
# `make image` unpacked, as its user (tests/cluster/kubelet): what a cluster would pull. test-cluster uses the venv.
test: $(INSTALLED) system test-system lint cluster-binaries image ## lint, the image, then every test lane (PYTEST_ARGS="-k store" narrows it)
	$(BIN)/pytest -n auto -m "$(FAST)" $(PYTEST_ARGS) || [ $$? = 5 ]  # 5: PYTEST_ARGS left none of this lane
	BAKEOFF_KUBELET_IMAGE=$(IMAGE_CACHE)/current $(BIN)/pytest -m "not ($(FAST)) and not kfp" $(PYTEST_ARGS) || [ $$? = 5 ]
	@$(KFP_SOURCES); found=$$?; [ $$found = 3 ] || { [ $$found = 0 ] && $(MAKE) --no-print-directory kfp-system kfp-binaries && $(KFP_LANE) || [ $$? = 5 ]; }

test-fast: $(INSTALLED) system ## the unit lane, one process per core: trains nothing, starts no server (the check before each commit)
	$(BIN)/pytest -n auto -m "$(FAST)" $(PYTEST_ARGS)

test-cluster: $(INSTALLED) system cluster-binaries ## the cluster lane: the real control plane on loopback (tests/cluster/)
	$(BIN)/pytest -m cluster $(PYTEST_ARGS)

test-kfp: $(INSTALLED) system kfp-system cluster-binaries kfp-binaries ## the kfp lane: the real KFP backend, built from a checkout (KFP_SOURCE; docs/tests.md)
	$(KFP_LANE)

kfp-binaries: $(INSTALLED) ## build KFP's backend and Argo from their checkouts into ~/.cache/bakeoff/{kfp,argo} (once a tag)
	$(BIN)/python -m tests.kfp.binaries

kfp-system: ## install the Debian package only the kfp lane uses when missing: mariadb-server
	$(call apt_install,$(KFP_PACKAGES))

lint: $(INSTALLED) typecheck ## ruff's lint rules, its formatter's layout, mypy and the import layers over the whole tree (pyproject.toml)
	$(BIN)/ruff check
	$(BIN)/ruff format --check
	PYTHONPATH=.lint $(BIN)/lint-imports --no-cache --no-logo  # the layers of docs/layout.md, through typecheck's links

typecheck: $(INSTALLED) ## mypy over the whole tree, the folders under their installed names (bakeoff.components, ...)
	@mkdir -p .lint/bakeoff && ln -sfn ../../components .lint/bakeoff/components && ln -sfn ../../pipelines .lint/bakeoff/pipelines
	$(BIN)/mypy

format: $(INSTALLED) ## apply ruff's safe fixes and its formatter to the whole tree
	$(BIN)/ruff check --fix-only
	$(BIN)/ruff format

bench: $(INSTALLED) system ## measure speed and quality; writes benchmarks/results.md and results.json (all but peers and search, ~2 h 6 min on 2 cores; BENCH_ARGS="--only peers" runs its 3 contests, ~2 h 20 min; "--only search" its 3 seeds, ~70 min)
	$(BIN)/python -m benchmarks.run $(BENCH_ARGS)

compile: $(INSTALLED) ## write pipelines/bakeoff.yaml, the compiled pipeline for the default config
	$(BIN)/bakeoff compile -o pipelines/bakeoff.yaml --image $(IMAGE)

image: ## build the runtime image with docker, else buildah or podman (IMAGE=registry/name:tag names it; images/build.sh)
	images/build.sh $(IMAGE)

clean: ## remove local run outputs (keeps .venv and the store)
	rm -rf .bakeoff .pytest_cache .mypy_cache .ruff_cache .lint

cluster-binaries: $(INSTALLED) ## build the control plane from its Go modules into ~/.cache/bakeoff/cluster (once per pin)
	$(BIN)/python -m tests.cluster.binaries

cluster: $(INSTALLED) system ## start the real control plane on loopback (built from Go modules once, 8-10 min); prints its kubeconfig
	$(BIN)/python -m tests.cluster.controlplane up

cluster-down: ## stop everything `make cluster` started
	$(BIN)/python -m tests.cluster.controlplane down
