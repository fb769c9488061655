#!/usr/bin/env bash
# Build the local clusters' Go binaries from the Go module proxy, once per version.
#
# Each binary lands in $TAS_BIN_CACHE/<component>-<version>/ and is skipped when already there,
# so a warm cache costs nothing. Versions come from the environment (the cluster_binaries role
# passes its cluster_binaries_versions); nothing here pins a version of its own. Each component
# asks for its own version variable, so a caller only sets the ones it builds.
set -euo pipefail

: "${TAS_BIN_CACHE:?set TAS_BIN_CACHE to the cache directory}"
: "${COMPONENTS:?set COMPONENTS to the components to build}"

# No DWARF is compiled: -ldflags -w drops it from the binaries anyway, and compiling without it
# took a tenth less time (descheduler, cold: 228 s instead of 254 s on 2 cores).
export CGO_ENABLED=0 GOFLAGS="-buildvcs=false -gcflags=all=-dwarf=false"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
log() { printf '[build-binaries] %s\n' "$*" >&2; }

# wrapper_module DIR MODULE: an empty module that only exists to require other modules.
wrapper_module() {
  mkdir -p "$1"
  printf 'module %s\n\ngo 1.24\n' "$2" >"$1/go.mod"
}

build_kubernetes() {
  local v="${KUBERNETES_VERSION:?}" out="$TAS_BIN_CACHE/kubernetes-$KUBERNETES_VERSION"
  local cmds=(kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy kubeadm) missing=() c
  for c in "${cmds[@]}"; do [[ -x "$out/$c" ]] || missing+=("$c"); done
  ((${#missing[@]})) || return 0
  log "kubernetes $v: ${missing[*]}"
  local d="$work/kubernetes"
  wrapper_module "$d" local/kubernetes-wrapper
  local minor="${v#v1.}"; minor="${minor%%.*}"
  # k8s.io/kubernetes replaces its staging modules with ./staging paths; a module that depends
  # on it must repeat each replace with the published v0.<minor>.<patch> version.
  local upstream
  upstream="$(cd "$d" && go mod download -json "k8s.io/kubernetes@$v" | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')"
  local staging="v0.${v#v1.}"
  {
    printf 'require k8s.io/kubernetes %s\n\nreplace (\n' "$v"
    awk '/^replace \(/{f=1;next} f&&/^\)/{f=0} f&&$1 ~ /^k8s.io\//{print $1}' "$upstream" |
      while read -r m; do printf '\t%s => %s %s\n' "$m" "$m" "$staging"; done
    printf ')\n'
  } >>"$d/go.mod"
  cat >"$d/tools.go" <<'GO'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kubeadm"
)
GO
  (cd "$d" && go mod tidy)
  local ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$v -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/client-go/pkg/version.gitVersion=$v -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=$minor"
  mkdir -p "$out"
  for cmd in "${missing[@]}"; do
    log "  go build $cmd"
    (cd "$d" && go build -trimpath -ldflags "$ldflags" -o "$out/$cmd.tmp" "k8s.io/kubernetes/cmd/$cmd")
    mv "$out/$cmd.tmp" "$out/$cmd"
  done
}

build_etcd() {
  local v="${ETCD_VERSION:?}" out="$TAS_BIN_CACHE/etcd-$ETCD_VERSION"
  [[ -x "$out/etcd" ]] && return
  log "etcd $v"
  local d="$work/etcd"
  wrapper_module "$d" local/etcd-wrapper
  {
    printf 'require go.etcd.io/etcd/server/v3 %s\n\nreplace (\n' "$v"
    for m in api client/pkg client/v3 pkg; do
      printf '\tgo.etcd.io/etcd/%s/v3 => go.etcd.io/etcd/%s/v3 %s\n' "${m%/v3}" "${m%/v3}" "$v"
    done
    printf ')\n'
  } >>"$d/go.mod"
  sed -i 's#go.etcd.io/etcd/client/v3/v3#go.etcd.io/etcd/client/v3#g' "$d/go.mod"
  printf '//go:build tools\n\npackage tools\n\nimport _ "go.etcd.io/etcd/server/v3/etcdmain"\n' >"$d/tools.go"
  cat >"$d/main.go" <<'GO'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
  (cd "$d" && go mod tidy)
  mkdir -p "$out.tmp"
  (cd "$d" && go build -trimpath -ldflags "-s -w" -o "$out.tmp/etcd" .)
  rm -rf "$out" && mv "$out.tmp" "$out"
}

build_kwok() {
  local v="${KWOK_VERSION:?}" out="$TAS_BIN_CACHE/kwok-$KWOK_VERSION"
  [[ -x "$out/kwok" && -d "$out/stages" ]] && return
  log "kwok $v"
  mkdir -p "$out.tmp/stages"
  GOBIN="$out.tmp" go install -trimpath -ldflags "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=${v#v}" "sigs.k8s.io/kwok/cmd/kwok@$v"
  # kwok refuses to start without stage configs; its module ships the standard ones.
  local src
  src="$(go mod download -json "sigs.k8s.io/kwok@$v" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')"
  cp "$src/kustomize/stage/node/fast/node-initialize.yaml" \
     "$src/kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml" \
     "$src/kustomize/stage/pod/fast/pod-ready.yaml" \
     "$src/kustomize/stage/pod/fast/pod-complete.yaml" \
     "$src/kustomize/stage/pod/fast/pod-delete.yaml" "$out.tmp/stages/"
  chmod u+w "$out.tmp/stages/"*
  rm -rf "$out" && mv "$out.tmp" "$out"
}

# build_from_module NAME MODULE VERSION PACKAGE LDFLAGS: a wrapper module that requires MODULE,
# repeating MODULE's own replace lines (a dependency's replaces do not apply to its users).
build_from_module() {
  local name="$1" mod="$2" v="$3" pkg="$4" ldflags="$5" out="$TAS_BIN_CACHE/$1-$3"
  [[ -x "$out/$name" ]] && return
  log "$name $v"
  local d="$work/$name"
  wrapper_module "$d" "local/$name-wrapper"
  printf 'require %s %s\n' "$mod" "$v" >>"$d/go.mod"
  local upstream
  upstream="$(cd "$d" && go mod download -json "$mod@$v" | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')"
  awk '/^replace \(/{f=1;next} f&&/^\)/{f=0;next} f{print "replace " $0} /^replace [^(]/{print}' "$upstream" \
    | grep -v '=> \.' >>"$d/go.mod" || true
  printf '//go:build tools\n\npackage tools\n\nimport _ "%s"\n' "$pkg" >"$d/tools.go"
  (cd "$d" && go mod tidy)
  mkdir -p "$out.tmp"
  (cd "$d" && go build -trimpath -ldflags "-s -w $ldflags" -o "$out.tmp/$name" "$pkg")
  rm -rf "$out" && mv "$out.tmp" "$out"
}

build_descheduler() {
  build_from_module descheduler sigs.k8s.io/descheduler "${DESCHEDULER_VERSION:?}" \
    sigs.k8s.io/descheduler/cmd/descheduler \
    "-X sigs.k8s.io/descheduler/pkg/version.version=$DESCHEDULER_VERSION"
}

# A NetworkPolicy enforcer for the real-node cluster, whose bridge CNI enforces none.
build_kube-network-policies() {
  build_from_module kube-network-policies sigs.k8s.io/kube-network-policies "${KUBE_NETWORK_POLICIES_VERSION:?}" \
    sigs.k8s.io/kube-network-policies/cmd ""
}

build_prometheus-adapter() {
  build_from_module prometheus-adapter sigs.k8s.io/prometheus-adapter "${PROMETHEUS_ADAPTER_VERSION:?}" \
    sigs.k8s.io/prometheus-adapter/cmd/adapter \
    "-X k8s.io/component-base/version.gitVersion=$PROMETHEUS_ADAPTER_VERSION"
}

# prometheus-operator and its CRDs (from its module's example/prometheus-operator-crd), for the
# tests that play a cluster whose monitoring the operator runs: it turns the collection's
# ServiceMonitor and PrometheusRule objects into a Prometheus configuration.
build_prometheus-operator() {
  local v="${PROMETHEUS_OPERATOR_VERSION:?}" out="$TAS_BIN_CACHE/prometheus-operator-$PROMETHEUS_OPERATOR_VERSION"
  local mod=github.com/prometheus-operator/prometheus-operator
  [[ -x "$out/prometheus-operator" && -d "$out/crds" ]] && return
  rm -rf "$out"
  build_from_module prometheus-operator "$mod" "$v" "$mod/cmd/operator" \
    "-X github.com/prometheus/common/version.Version=${v#v}"
  local src
  src="$(go mod download -json "$mod@$v" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')"
  mkdir -p "$out/crds.tmp"
  cp "$src"/example/prometheus-operator-crd/*.yaml "$out/crds.tmp/"
  chmod u+w "$out/crds.tmp/"*
  mv "$out/crds.tmp" "$out/crds"
}

build_kind() {
  local v="${KIND_VERSION:?}" out="$TAS_BIN_CACHE/kind-$KIND_VERSION"
  [[ -x "$out/kind" ]] && return
  log "kind $v"
  mkdir -p "$out.tmp"
  GOBIN="$out.tmp" go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kind@$v"
  rm -rf "$out" && mv "$out.tmp" "$out"
}

# The real-node cluster's runtime: containerd 2.x has no replace directives, so a plain
# `go install` works; the tags drop snapshotters that need cgo or devices (overlayfs is used).
build_containerd() {
  local v="${CONTAINERD_VERSION:?}" out="$TAS_BIN_CACHE/containerd-$CONTAINERD_VERSION"
  [[ -x "$out/containerd" && -x "$out/ctr" && -x "$out/containerd-shim-runc-v2" ]] && return
  log "containerd $v"
  mkdir -p "$out.tmp"
  local m=github.com/containerd/containerd/v2
  GOBIN="$out.tmp" go install -trimpath -tags "no_btrfs no_devmapper no_zfs" \
    -ldflags "-s -w -X $m/version.Version=$v" \
    "$m/cmd/containerd@$v" "$m/cmd/ctr@$v" "$m/cmd/containerd-shim-runc-v2@$v"
  rm -rf "$out" && mv "$out.tmp" "$out"
}

# CoreDNS with only the plugins kubeadm's Corefile uses: the full plugin set (every cloud
# DNS provider) triples the build time for nothing.
build_coredns() {
  local v="${COREDNS_VERSION:?}" out="$TAS_BIN_CACHE/coredns-$COREDNS_VERSION"
  [[ -x "$out/coredns" ]] && return
  log "coredns $v (kubeadm's plugins only)"
  local d="$work/coredns" p
  wrapper_module "$d" local/coredns-wrapper
  printf 'require github.com/coredns/coredns %s\n' "$v" >>"$d/go.mod"
  {
    printf 'package main\n\nimport (\n'
    for p in errors health ready kubernetes metrics forward cache loop reload loadbalance log; do
      printf '\t_ "github.com/coredns/coredns/plugin/%s"\n' "$p"
    done
    printf '\n\t"github.com/coredns/coredns/coremain"\n)\n\nfunc main() { coremain.Run() }\n'
  } >"$d/main.go"
  (cd "$d" && go mod tidy)
  mkdir -p "$out.tmp"
  (cd "$d" && go build -trimpath -ldflags "-s -w -X github.com/coredns/coredns/coremain.GitCommit=$v" -o "$out.tmp/coredns" .)
  rm -rf "$out" && mv "$out.tmp" "$out"
}

build_node-exporter() {
  local v="${NODE_EXPORTER_VERSION:?}" out="$TAS_BIN_CACHE/node-exporter-$NODE_EXPORTER_VERSION"
  [[ -x "$out/node_exporter" ]] && return
  log "node-exporter $v"
  mkdir -p "$out.tmp"
  GOBIN="$out.tmp" go install -trimpath \
    -ldflags "-s -w -X github.com/prometheus/common/version.Version=${v#v}" \
    "github.com/prometheus/node_exporter@$v"
  rm -rf "$out" && mv "$out.tmp" "$out"
}

# Prometheus publishes its Go module as v0.<minor>.<patch> for release v2.<minor>.<patch>; the
# web UI's assets are not in the module, so the UI is absent and the HTTP API is complete.
# promtool comes with it, as in Prometheus's own image, to check configurations where they run.
build_prometheus() {
  local v="${PROMETHEUS_VERSION:?}" m="v0.${PROMETHEUS_VERSION#v2.}" out="$TAS_BIN_CACHE/prometheus-$PROMETHEUS_VERSION"
  [[ -x "$out/prometheus" && -x "$out/promtool" ]] && return
  log "prometheus $v (module $m) and promtool"
  local d="$work/prometheus" cmd
  wrapper_module "$d" local/prometheus-wrapper
  printf 'require github.com/prometheus/prometheus %s\n' "$m" >>"$d/go.mod"
  local upstream
  upstream="$(cd "$d" && go mod download -json "github.com/prometheus/prometheus@$m" | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')"
  awk '/^replace \(/{f=1;next} f&&/^\)/{f=0;next} f{print "replace " $0} /^replace [^(]/{print}' "$upstream" \
    | grep -v '=> \.' >>"$d/go.mod" || true
  printf '//go:build tools\n\npackage tools\n\nimport (\n\t_ "github.com/prometheus/prometheus/cmd/prometheus"\n\t_ "github.com/prometheus/prometheus/cmd/promtool"\n)\n' >"$d/tools.go"
  (cd "$d" && go mod tidy)
  mkdir -p "$out.tmp"
  for cmd in prometheus promtool; do
    (cd "$d" && go build -trimpath -ldflags "-s -w -X github.com/prometheus/common/version.Version=${v#v}" \
      -o "$out.tmp/$cmd" "github.com/prometheus/prometheus/cmd/$cmd")
  done
  rm -rf "$out" && mv "$out.tmp" "$out"
}

mkdir -p "$TAS_BIN_CACHE"
for c in $COMPONENTS; do "build_$c"; done
log "done: $TAS_BIN_CACHE"
