#!/usr/bin/env bash
# What `make test` runs, in order, read top to bottom. A stage is one or more groups of make
# targets: the groups of one stage run side by side, the targets of a group one after the other
# (one make call). The first group's output is shown as it comes; each other group's is kept in
# build/<group>.log and shown when the stage is done. A stage starts when the one before it has
# passed. Each stage's and each group's time is appended to $TAS_TEST_DURATIONS, which is printed
# last with the slowest tests, then the failures ($TAS_TEST_FAILURES); the Makefile sets both.
set -uo pipefail

: "${TAS_TEST_DURATIONS:?run through make test}" "${TAS_TEST_FAILURES:?run through make test}"
make=("${MAKE:-make}" --no-print-directory)
logs=$(dirname "$TAS_TEST_DURATIONS")
rm -f "$TAS_TEST_FAILURES" "$TAS_TEST_DURATIONS"
mkdir -p "$logs"

# group "TARGET...": one make call for the targets, in order, timed.
group() {
  local start=$SECONDS rc=0
  # shellcheck disable=SC2086 # a group is its targets, split on spaces
  "${make[@]}" $1 || rc=$?
  echo "  make $1: $((SECONDS - start)) s, exit $rc" >>"$TAS_TEST_DURATIONS"
  return "$rc"
}

# side_by_side "GROUP"...: every group at once; fails if any failed.
side_by_side() {
  local pids=() each pid status=0
  group "$1" & pids+=($!)
  for each in "${@:2}"; do group "$each" >"$logs/${each// /+}.log" 2>&1 & pids+=($!); done
  for pid in "${pids[@]}"; do wait "$pid" || status=$?; done
  for each in "${@:2}"; do echo "--- make $each (beside make $1)"; cat "$logs/${each// /+}.log"; done
  return "$status"
}

# cpu_ticks: the machine's busy and total CPU ticks since boot (the first line of /proc/stat).
cpu_ticks() {
  local _ user nice system idle iowait rest
  read -r _ user nice system idle iowait rest </proc/stat
  echo "$((user + nice + system)) $((user + nice + system + idle + iowait))"
}

# stage "GROUP"...: one stage, timed, with how busy the CPUs were meanwhile (a stage near 100 %
# is shortened only by less work, not by more side by side); the run stops at the first stage
# that fails.
stage() {
  local start=$SECONDS rc=0 name busy0 total0 busy1 total1
  name=$(IFS=,; echo "$*")
  read -r busy0 total0 < <(cpu_ticks)
  side_by_side "$@" || rc=$?
  read -r busy1 total1 < <(cpu_ticks)
  echo "stage $name: $((SECONDS - start)) s, exit $rc, CPU $(((busy1 - busy0) * 100 / (total1 - total0 + 1))) % busy" |
    tee -a "$TAS_TEST_DURATIONS"
  if [ "$rc" != 0 ]; then
    finish "make test failed at stage $name"
  fi
}

finish() {
  echo "--- where the time went ($TAS_TEST_DURATIONS)"
  cat "$TAS_TEST_DURATIONS"
  if [ -n "${1:-}" ]; then
    echo "$1"
    [ ! -s "$TAS_TEST_FAILURES" ] || cat "$TAS_TEST_FAILURES"
    exit 2
  fi
  exit 0
}

# What the others need first, side by side: pip and apt wait on the network.
stage venv prometheus-tools
# No cluster: unit and API tests, and the linters, each mostly one core. Beside them the KWOK
# cluster comes up (on a cold machine this builds its binaries, the longest wait of a first run)
# and then the kind scenario runs (kind create cluster, the roles' defaults, the demo, the
# uninstall, kind delete cluster; its Docker engine stopped again), after the KWOK cluster in the
# same group so that the two never build into the binaries' cache at once. It runs here, not
# beside the real-node cluster, whose host comparison would count Docker's links and mounts; by
# the real-node scenarios' create it has left the host as it found it. A real-node cluster left
# running (`make demo`'s) goes down now rather than at the real-node scenarios' create, so that
# it takes no CPU later.
stage unit lint "cluster kind" real-cluster-down
# The two clusters side by side: the real-node one brought up for the roles' defaults (the
# upgrade and managed phases are `make realnode-phases`, outside for time), taken down and the
# host compared; beside it, on the KWOK cluster, the integration tests and then the KWOK
# scenario (the demo with every service on the host). The real-node cluster waits on its timers
# (scrape, sync, the descheduler's minute) much of the time, which is when the KWOK side runs.
# Nothing is shared: the KWOK cluster lives in its own directory on 127.0.0.1, the real-node
# cluster in its nodes' namespaces (docs/local-cluster.md, "Two clusters at once").
stage realnode "integration molecule"
finish
