# The one entry point for people and CI. Every target installs what it needs first.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help
# One cluster, one machine: targets run one after the other even under make -j.
.NOTPARALLEL:

VENV ?= .venv
PYTHON ?= python3
# The local clusters' state (kubeconfig, bin/, logs/): KWOK's (roles/local_cluster) and the
# real-node cluster's (roles/real_cluster).
TAS_LOCAL_CLUSTER_DIR ?= $(HOME)/.local/state/tas-local-cluster
TAS_REAL_CLUSTER_DIR ?= $(HOME)/.local/state/tas-real-cluster
# Commands against the real-node cluster: its kubeconfig and its kubectl first.
ON_REAL_CLUSTER := KUBECONFIG=$(TAS_REAL_CLUSTER_DIR)/kubeconfig PATH=$(TAS_REAL_CLUSTER_DIR)/bin:$$PATH

export TAS_REAL_CLUSTER_DIR
export KUBECONFIG ?= $(TAS_LOCAL_CLUSTER_DIR)/kubeconfig
export PATH := $(CURDIR)/$(VENV)/bin:$(TAS_LOCAL_CLUSTER_DIR)/bin:$(PATH)
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg

COLLECTION := collections/ansible_collections/intel/tas

.PHONY: help venv prometheus-tools cluster cluster-down real-cluster real-cluster-images real-cluster-down demo demo-kwok test unit lint integration molecule realnode realnode-phases kind reliability bench soak clean

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/'

venv: $(VENV)/.installed ## Create the virtualenv: the harness, tests and linters, and the extender, pinned

# One resolution: requirements.txt (harness, tests, linters) and the extender, both under
# constraints.txt (the extender's run-time set, exact). The extender is installed as a copy (as
# in its image), so a change to its sources reinstalls it.
$(VENV)/.installed: requirements.txt constraints.txt extender_app/pyproject.toml $(shell find extender_app/tas_extender -name '*.py')
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip==26.3
	$(VENV)/bin/pip install --quiet -r requirements.txt ./extender_app
	touch $@

# The benchmarks' tools on top (matplotlib, py-spy): only make bench and make soak need them.
$(VENV)/.bench-installed: $(VENV)/.installed requirements-bench.txt
	$(VENV)/bin/pip install --quiet -r requirements-bench.txt
	touch $@

cluster: venv ## Bring the KWOK cluster up (builds its binaries once, cached in ~/.cache)
	ansible-playbook playbooks/cluster.yml

cluster-down: venv ## Stop the KWOK cluster and remove its state
	ansible-playbook playbooks/cluster.yml -e cluster_state=absent

real-cluster: venv ## Bring the real-node cluster up: kubeadm, a control plane and 3 workers running real containers
	ansible-playbook -i inventory/real playbooks/real_cluster.yml

# At the lowest CPU priority, for building ahead beside other work (make realnode builds what is
# missing itself, in its create).
real-cluster-images: venv ## Build the real-node cluster's binaries and images into the cache, and nothing else
	nice -n 19 ansible-playbook -i inventory/real playbooks/real_cluster.yml -e cluster_state=images

real-cluster-down: venv ## Stop the real-node cluster and leave the machine as it was
	ansible-playbook -i inventory/real playbooks/real_cluster.yml -e cluster_state=absent

demo: real-cluster ## Install everything with the roles' defaults on the real-node cluster and run the health-metric demo
	$(ON_REAL_CLUSTER) ansible-playbook -i inventory/real playbooks/site.yml
	$(ON_REAL_CLUSTER) ansible-playbook -i inventory/real playbooks/health_metric_demo.yml

demo-kwok: cluster ## The same demo on the KWOK cluster, every service on the host (faster, no containers)
	ansible-playbook playbooks/site.yml
	ansible-playbook playbooks/health_metric_demo.yml

# promtool, with which the unit tests check and fire the alert rules: the distribution's
# prometheus package, as the KWOK cluster's host-mode Prometheus uses (RUNLEVEL=1: its service
# is not started).
prometheus-tools: ## promtool from the distribution's prometheus package (root)
	command -v promtool >/dev/null || { apt-get update -qq && RUNLEVEL=1 DEBIAN_FRONTEND=noninteractive \
	  apt-get install -y -qq --no-install-recommends prometheus >/dev/null; }

unit: venv prometheus-tools ## Unit and API tests (no cluster needed)
	pytest tests/unit tests/api

lint: venv ## ansible-lint (production profile), ansible-test sanity and units, changelog lint, collection build checked
	@# Python: ruff (style, likely bugs, shadowed names) and mypy over the extender and the benchmarks.
	ruff check --config extender_app/pyproject.toml extender_app/tas_extender bench
	mypy --config-file extender_app/pyproject.toml extender_app/tas_extender bench
	ansible-lint --profile production
	@# ansible-test downloads a pip bootstrap script from a host this machine may not reach.
	[ -f $(HOME)/.ansible/test/cache/get_pip_24_2.py ] || install -D -m 0644 tests/sanity/get_pip_offline.py $(HOME)/.ansible/test/cache/get_pip_24_2.py
	cd $(COLLECTION) && ansible-test sanity --local --python 3.11
	cd $(COLLECTION) && ansible-test units --local --python 3.11
	cd $(COLLECTION) && antsibull-changelog lint
	cd $(COLLECTION) && ansible-galaxy collection build --force --output-path $(CURDIR)/build >/dev/null
	@# galaxy.yml's version is the changelog's last release; the tarball has no tests or caches.
	python tests/sanity/check_collection_build.py $(COLLECTION) build

integration: cluster ## Tests against the local cluster's real API server (made bare first if the demo runs on it)
	@python tests/integration/bare_cluster.py || { echo "make integration: taking the KWOK cluster down and up again, bare (these tests label its nodes themselves)"; \
	  ansible-playbook playbooks/cluster.yml -e cluster_state=absent && ansible-playbook playbooks/cluster.yml; }
	pytest tests/integration

reliability: venv ## Faults, failover and RBAC against the stack `make demo-kwok` provisioned (molecule's verify runs them too)
	pytest -p no:cacheprovider tests/reliability

molecule: venv ## The health-metric demo end to end on the KWOK cluster: cluster up, converge, idempotence, verify, down
	molecule test -s kwok

# One real-node cluster for the three scenarios (molecule's shared state): the default scenario's
# create brings it up and its destroy takes it down and compares the host; each runs alone too.
# Their molecule state starts afresh: a run cut off leaves it saying "created", and molecule would
# skip the create that takes down what such a run left. Outside the repository (the upgrade
# unpacks the previous release's tree there), and under a name without the cluster's markers
# (tests/realnode/host_state.py would count molecule's own processes as the cluster's).
REALNODE_MOLECULE_DIR := $(HOME)/.local/state/tas-molecule-realnode
REALNODE_SCENARIOS := default
realnode: venv ## Real nodes: the roles' defaults (site.yml twice, the demo, tests, uninstall); down (host as before)
	rm -rf $(REALNODE_MOLECULE_DIR)
	$(ON_REAL_CLUSTER) MOLECULE_EPHEMERAL_DIRECTORY=$(REALNODE_MOLECULE_DIR) molecule test $(addprefix -s ,$(REALNODE_SCENARIOS))

# Not in make test: with these two make test took 94 minutes on the 2-core machine (5645 s,
# warm caches), over CI's 90; the default scenario alone keeps it near 67.
realnode-phases: ## Real nodes, the three scenarios on one cluster: the defaults, the upgrade from the previous release, the cluster as a managed one
	$(MAKE) realnode REALNODE_SCENARIOS="default upgrade managed"

# kind on this machine: no registry answers and `--privileged` needs a capability the machine
# lacks, so the node image is built from the project's binaries and the role starts a Docker
# engine of its own (docs/local-cluster.md, "kind"). On a host with Docker and internet:
# `molecule test -s kind`, nothing built.
kind: venv ## kind: kind create cluster, the roles' defaults (site.yml twice, the demo, uninstall), kind delete cluster
	TAS_KIND_BUILD_NODE_IMAGE=true TAS_KIND_DOCKER=start molecule test -s kind

# Every pytest run under make appends its failures here, one line each (tests/conftest.py);
# make test prints them last, so that the end of a long run's output says what failed.
export TAS_TEST_FAILURES := $(CURDIR)/build/test-failures.txt
# ... and its slowest tests here, for finding where the time goes
export TAS_TEST_DURATIONS := $(CURDIR)/build/test-durations.txt

test: ## Everything CI runs, stage by stage (tests/make-test.sh says which, in order)
	@MAKE=$(MAKE) bash tests/make-test.sh

bench: $(VENV)/.bench-installed ## Benchmarks (not tests): writes bench/results and docs/performance.md
	$(VENV)/bin/python -m bench

soak: $(VENV)/.bench-installed ## Load held for 30 min against the extender (not a test): writes bench/results/soak.json
	$(VENV)/bin/python -m bench.soak --minutes 30

clean: cluster-down ## Take the cluster down and remove build output
	rm -rf build
