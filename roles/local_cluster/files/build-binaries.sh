#!/usr/bin/env bash
# Build the local cluster's Go binaries from the Go module proxy, once per version.
#
# Each binary lands in $TAS_BIN_CACHE/<component>-<version>/ and is skipped when already there,
# so a warm cache costs nothing. Versions come from the environment (the local_cluster role
# passes its defaults); nothing here pins a version of its own.
set -euo pipefail

: "${TAS_BIN_CACHE:?set TAS_BIN_CACHE to the cache directory}"
: "${KUBERNETES_VERSION:?}" "${ETCD_VERSION:?}" "${KWOK_VERSION:?}" "${DESCHEDULER_VERSION:?}"
: "${PROMETHEUS_ADAPTER_VERSION:?}" "${KIND_VERSION:?}"
COMPONENTS="${COMPONENTS:-kubernetes etcd kwok descheduler prometheus-adapter kind}"

export CGO_ENABLED=0 GOFLAGS=-buildvcs=false
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
log() { printf '[build-binaries] %s\n' "$*" >&2; }

# wrapper_module DIR MODULE: an empty module that only exists to require other modules.
wrapper_module() {
  mkdir -p "$1"
  printf 'module %s\n\ngo 1.24\n' "$2" >"$1/go.mod"
}

build_kubernetes() {
  local v="$KUBERNETES_VERSION" out="$TAS_BIN_CACHE/kubernetes-$KUBERNETES_VERSION"
  [[ -x "$out/kube-apiserver" && -x "$out/kube-controller-manager" && -x "$out/kube-scheduler" && -x "$out/kubectl" ]] && return
  log "kubernetes $v"
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
)
GO
  (cd "$d" && go mod tidy)
  local ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$v -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/client-go/pkg/version.gitVersion=$v -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=$minor"
  mkdir -p "$out.tmp"
  for cmd in kube-apiserver kube-controller-manager kube-scheduler kubectl; do
    log "  go build $cmd"
    (cd "$d" && go build -trimpath -ldflags "$ldflags" -o "$out.tmp/$cmd" "k8s.io/kubernetes/cmd/$cmd")
  done
  rm -rf "$out" && mv "$out.tmp" "$out"
}

build_etcd() {
  local v="$ETCD_VERSION" out="$TAS_BIN_CACHE/etcd-$ETCD_VERSION"
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
  local v="$KWOK_VERSION" out="$TAS_BIN_CACHE/kwok-$KWOK_VERSION"
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
  build_from_module descheduler sigs.k8s.io/descheduler "$DESCHEDULER_VERSION" \
    sigs.k8s.io/descheduler/cmd/descheduler \
    "-X sigs.k8s.io/descheduler/pkg/version.version=$DESCHEDULER_VERSION"
}

build_prometheus-adapter() {
  build_from_module prometheus-adapter sigs.k8s.io/prometheus-adapter "$PROMETHEUS_ADAPTER_VERSION" \
    sigs.k8s.io/prometheus-adapter/cmd/adapter \
    "-X k8s.io/component-base/version.gitVersion=$PROMETHEUS_ADAPTER_VERSION"
}

build_kind() {
  local v="$KIND_VERSION" out="$TAS_BIN_CACHE/kind-$KIND_VERSION"
  [[ -x "$out/kind" ]] && return
  log "kind $v"
  mkdir -p "$out.tmp"
  GOBIN="$out.tmp" go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kind@$v"
  rm -rf "$out" && mv "$out.tmp" "$out"
}

mkdir -p "$TAS_BIN_CACHE"
for c in $COMPONENTS; do "build_$c"; done
log "done: $TAS_BIN_CACHE"
