#!/usr/bin/env bash
# What `make test` runs, in order, read top to bottom. Each stage is one or more make targets:
# targets of one stage run side by side (the first one's output shown as it comes, each other's
# kept in build/<target>.log and shown when the stage is done), and a stage starts when the one
# before it has passed. Each stage's time is appended to $TAS_TEST_DURATIONS, which is printed
# last with the slowest tests, then the failures ($TAS_TEST_FAILURES); the Makefile sets both.
set -uo pipefail

: "${TAS_TEST_DURATIONS:?run through make test}" "${TAS_TEST_FAILURES:?run through make test}"
make=("${MAKE:-make}" --no-print-directory)
logs=$(dirname "$TAS_TEST_DURATIONS")
rm -f "$TAS_TEST_FAILURES" "$TAS_TEST_DURATIONS"
mkdir -p "$logs"

# side_by_side TARGET...: every target at once; fails if any failed.
side_by_side() {
  local pids=() target pid status=0
  "${make[@]}" "$1" & pids+=($!)
  for target in "${@:2}"; do "${make[@]}" "$target" >"$logs/$target.log" 2>&1 & pids+=($!); done
  for pid in "${pids[@]}"; do wait "$pid" || status=$?; done
  for target in "${@:2}"; do echo "--- make $target (beside make $1)"; cat "$logs/$target.log"; done
  return "$status"
}

# stage TARGET...: one stage, timed; the run stops at the first stage that fails.
stage() {
  local start=$SECONDS rc=0 name
  name=$(IFS=+; echo "$*")
  side_by_side "$@" || rc=$?
  echo "make $name: $((SECONDS - start)) s, exit $rc" | tee -a "$TAS_TEST_DURATIONS"
  if [ "$rc" != 0 ]; then
    finish "make test failed at make $name"
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
# No cluster: unit and API tests; beside them the linters, each mostly one core.
stage unit lint
# The KWOK cluster: its integration tests, then its molecule scenario (the demo with every
# service on the host). Beside the scenario, whose waits leave a core idle much of the time, the
# real-node cluster's binaries and images are built at the lowest CPU priority.
stage integration
stage molecule real-cluster-images
# The real-node cluster, brought up once for every phase: the roles' defaults, the cluster as a
# managed one, the upgrade from the previous release; taken down and the host compared.
stage realnode
finish
