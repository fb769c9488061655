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

.PHONY: help venv prometheus-tools cluster cluster-down real-cluster real-cluster-binaries real-cluster-down demo demo-kwok test unit lint integration molecule realnode realnode-upgrade realnode-managed reliability bench soak clean

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

# At the lowest CPU priority: make test runs it beside the KWOK scenario, whose waits leave a core
# idle much of the time, so that the real-node scenario finds its binaries built.
real-cluster-binaries: venv ## Build the real-node cluster's binaries into the cache, and nothing else
	nice -n 19 ansible-playbook -i inventory/real playbooks/real_cluster.yml -e cluster_state=binaries

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

molecule: venv ## The health-metric demo end to end: cluster up, converge, idempotence, verify, down
	molecule test -s default

realnode: venv ## The roles' defaults on real nodes: cluster up, site.yml twice, the demo and tests, down (host as before)
	$(ON_REAL_CLUSTER) molecule test -s realnode

realnode-upgrade: venv ## The same with the upgrade from the previous release under load (about 14 min more; not in make test yet)
	$(ON_REAL_CLUSTER) TAS_UPGRADE_CHECK=1 molecule test -s realnode

realnode-managed: venv ## The same with the cluster's second up, the second uninstall, then the cluster as a managed one: the second scheduler installed, checked, removed (about 10 min more; not in make test)
	$(ON_REAL_CLUSTER) TAS_MANAGED_CHECK=1 molecule test -s realnode

# Every pytest run under make appends its failures here, one line each (tests/conftest.py);
# make test prints them last, so that the end of a long run's output says what failed.
export TAS_TEST_FAILURES := $(CURDIR)/build/test-failures.txt
# ... and its slowest tests here, for finding where the time goes
export TAS_TEST_DURATIONS := $(CURDIR)/build/test-durations.txt

# Targets joined by "+" run side by side, the first one's output shown as it comes, each other's
# kept in build/<target>.log and shown when all are done. Unit and lint need no cluster and each
# mostly keeps one core busy. The real-node cluster's own binaries (cold, about 9 minutes of both
# cores) build while the KWOK scenario waits on its cluster; those the two clusters share were
# built by make integration before. What the parts need (the virtualenv, promtool) is made
# first, also side by side: pip and apt wait on the network.
TEST_STAGES := unit+lint integration molecule+real-cluster-binaries realnode
SHARED_FIRST := venv+prometheus-tools

# Each stage in turn, its time appended to the durations file ("make <stage>: N s, exit R"),
# which is printed last with the slowest tests, then the failures.
test: ## Everything CI runs
	@rm -f $(TAS_TEST_FAILURES) $(TAS_TEST_DURATIONS); mkdir -p $(dir $(TAS_TEST_DURATIONS)); failed=; \
	side_by_side() { \
	  local parts=($${1//+/ }) part pid pids=() status=0; \
	  $(MAKE) --no-print-directory $${parts[0]} & pids+=($$!); \
	  for part in "$${parts[@]:1}"; do $(MAKE) --no-print-directory $$part >$(dir $(TAS_TEST_DURATIONS))$$part.log 2>&1 & pids+=($$!); done; \
	  for pid in "$${pids[@]}"; do wait $$pid || status=$$?; done; \
	  for part in "$${parts[@]:1}"; do echo "--- make $$part (beside make $${parts[0]})"; cat $(dir $(TAS_TEST_DURATIONS))$$part.log; done; \
	  return $$status; \
	}; \
	for stage in $(TEST_STAGES); do \
	  start=$$(date +%s); rc=0; \
	  if [[ $$stage == *+* ]]; then side_by_side $(SHARED_FIRST) && side_by_side $$stage || rc=$$?; \
	  else $(MAKE) --no-print-directory $$stage || rc=$$?; fi; \
	  echo "make $$stage: $$(( $$(date +%s) - start )) s, exit $$rc" | tee -a $(TAS_TEST_DURATIONS); \
	  if [ $$rc != 0 ]; then failed=$$stage; break; fi; \
	done; \
	echo "--- where the time went ($(TAS_TEST_DURATIONS))"; cat $(TAS_TEST_DURATIONS); \
	if [ -n "$$failed" ]; then echo "make test failed at make $$failed"; \
	  [ ! -s $(TAS_TEST_FAILURES) ] || cat $(TAS_TEST_FAILURES); exit 2; fi

bench: $(VENV)/.bench-installed ## Benchmarks (not tests): writes bench/results and docs/performance.md
	$(VENV)/bin/python -m bench

soak: $(VENV)/.bench-installed ## Load held for 30 min against the extender (not a test): writes bench/results/soak.json
	$(VENV)/bin/python -m bench.soak --minutes 30

clean: cluster-down ## Take the cluster down and remove build output
	rm -rf build
