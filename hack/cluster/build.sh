#!/usr/bin/env bash
# Build and cache the local cluster's binaries from Go modules (no Docker, no GitHub downloads).
#
#   hack/cluster/build.sh          build what is missing, print each step's wall time
#
# Layout (keyed by version, so a version bump never reuses a stale binary):
#   $GPUCTL_TESTBED_CACHE (default ${XDG_CACHE_HOME:-~/.cache}/gpuctl-testbed)
#     bin/k8s-<v>/{kube-apiserver,kube-controller-manager,kube-scheduler,kubectl,.complete}
#     bin/etcd-<v>/{etcd,.complete}   bin/kwok-<v>/{kwok,.complete}   bin/kueue-<v>/{kueue,.complete}
#     bin/helm-<v>/{helm,.complete}   (charts/gpuctl lint and render; tests/integration/test_chart.py)
#     bin/kueuectl-<v>/kubectl-kueue   Kueue's CLI (tests/integration/test_stop_estimate.py)
#     bin/jobset-<v>/jobset           the JobSet controller, the version Kueue's go.mod pins (up.sh runs it
#                                     only with GPUCTL_TESTBED_JOBSET=1; tests/integration/test_jobset.py)
#     bin/lws-<v>/lws                 the LeaderWorkerSet controller, the version Kueue's go.mod pins (up.sh
#                                     runs it only with GPUCTL_TESTBED_LWS=1; tests/integration/test_lws.py)
#     bin/prometheus-adapter-<v>/adapter  external.metrics.k8s.io from Prometheus, for autoscaled services
#                                     (hack/cluster/autoscaling.sh; tests/integration/test_serving.py)
#     bin/kind-validate-<v>/kind-validate   kind's own config loader + Validate, for hack/kind/cluster.yaml
#     bin/celeval-<key>/celeval       hack/celeval: kube-apiserver's ValidatingAdmissionPolicy machinery of
#                                     k8s.io/apiserver v0.<K8S_VERSION minor.patch> as a JSON-lines harness
#                                     (tests/unit/test_admission_cel_agreement.py); key = sha256 of its
#                                     main.go, go.mod and go.sum (tests/unit/celeval.py computes the same)
#     bin/kind-<v>/kind               only with GPUCTL_BUILD_KIND=1 (hack/kind.sh; needs Docker to run)
#     bin/kubelet-<v>/kubelet         only with GPUCTL_BUILD_REAL_NODE=1 (hack/cluster/up.sh --real-node)
#     bin/pause-<key>/{pause,pause.oci.tar}  the real node's sandbox image, same switch; key = sha256 of
#                                     hack/cluster/pause/main.go and this recipe (no registry here)
#     bin/coredns-<v>/coredns         the real node's cluster DNS, same switch: CoreDNS's own main with only the
#                                     plugins hack/cluster/real-node.sh's Corefile uses (kubernetes, errors,
#                                     health, ready, log), as CoreDNS documents for custom builds
#     src/<component>-<v>/            scratch Go modules
#     dirs.env                        module source dirs of kueue and kwok (CRDs, webhooks, stages)
# A flock on $CACHE/build.lock makes two concurrent builds safe: the second waits, then skips.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
source "$HERE/versions.env"
CACHE="${GPUCTL_TESTBED_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpuctl-testbed}"
mkdir -p "$CACHE/bin" "$CACHE/src"
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-trimpath

CHECK_ONLY=0 MISSING=() CPU=0
cpu_now() { # CPU <- CPU seconds (user + system) of this shell's finished children (no fork: a subshell has its own)
  local st; read -ra st <"/proc/$BASHPID/stat"
  CPU=$(( (st[15] + st[16]) / TICKS ))
}
TICKS=$(getconf CLK_TCK)

step() { # step NAME DIR FUNCTION   (with CHECK_ONLY=1: only note in MISSING what is not built)
  local name=$1 dir=$2 fn=$3 t0 c0
  if [[ -f "$dir/.complete" ]]; then (( CHECK_ONLY )) || echo "build: $name cached in $dir"; return; fi
  if (( CHECK_ONLY )); then MISSING+=("$name"); return; fi
  t0=$(date +%s); cpu_now; c0=$CPU
  echo "build: $name -> $dir"
  mkdir -p "$dir"
  "$fn" "$dir"
  touch "$dir/.complete"
  # Wall time and CPU time: the machine may be shared, and the CPU seconds are what a step costs.
  cpu_now
  echo "build: $name done in $(( $(date +%s) - t0 ))s (cpu $(( CPU - c0 ))s)"
}

k8s_module() { # k8s_module DIR: a scratch module that builds commands of k8s.io/kubernetes@v$K8S_VERSION
  local w=$1 stg="0.${K8S_VERSION#1.}" mod m
  mkdir -p "$w"; cd "$w"
  [[ -f go.mod ]] || go mod init "gpuctl.local/$(basename "$w" | tr -d .)" >/dev/null
  mod=$(go mod download -json "k8s.io/kubernetes@v$K8S_VERSION" | python3 -c 'import sys,json;print(json.load(sys.stdin)["GoMod"])')
  # The staging replace block is derived from the release's own go.mod, never hard-coded.
  for m in $(sed -nE 's#^\s*(k8s\.io/[a-z0-9-]+) => \./staging/.*#\1#p' "$mod"); do
    go mod edit "-replace=$m=$m@v$stg"
  done
  go mod edit "-require=k8s.io/kubernetes@v$K8S_VERSION"
}

k8s_ldflags() {
  local stg="0.${K8S_VERSION#1.}" min ldf p2
  min=${stg#0.}; min=${min%%.*}
  ldf="-s -w"
  # Version stamp: without it gitVersion is "v0.0.0-master+$Format:%H$" and Kueue exits on startup.
  for p2 in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldf+=" -X $p2.gitVersion=v$K8S_VERSION -X $p2.gitMajor=1 -X $p2.gitMinor=$min -X $p2.gitTreeState=clean -X $p2.buildDate=2026-01-01T00:00:00Z"
  done
  echo "$ldf"
}

build_k8s() {
  local bin=$1 p=k8s.io/kubernetes/cmd
  k8s_module "$CACHE/src/k8s-$K8S_VERSION"
  go get "$p/kube-apiserver@v$K8S_VERSION" "$p/kube-controller-manager@v$K8S_VERSION" \
         "$p/kube-scheduler@v$K8S_VERSION" "$p/kubectl@v$K8S_VERSION"
  go build -tags selinux,notest,grpcnotrace -ldflags "$(k8s_ldflags)" -o "$bin/" \
    "$p/kube-apiserver" "$p/kube-controller-manager" "$p/kube-scheduler" "$p/kubectl"
  "$bin/kube-apiserver" --version
}

build_kubelet() {
  # The real node's kubelet (hack/cluster/real-node.sh), from the same Kubernetes module as the control
  # plane. Its own scratch module: `go get cmd/kubelet` adds modules the control plane does not need
  # (k8s.io/cri-streaming), and the control plane's cached binaries must not change.
  local bin=$1 p=k8s.io/kubernetes/cmd
  k8s_module "$CACHE/src/kubelet-$K8S_VERSION"
  go get "$p/kubelet@v$K8S_VERSION"
  go build -tags selinux,notest,grpcnotrace -ldflags "$(k8s_ldflags)" -o "$bin/kubelet" "$p/kubelet"
  "$bin/kubelet" --version
}

build_pause() {
  # The pod sandbox image. Without a registry there is no registry.k8s.io/pause: a static Go binary that
  # does what pause does (sleep, reap adopted children, exit on SIGINT/SIGTERM), packed as a one-layer OCI
  # archive by hack/cluster/oci_archive.py (reproducible: fixed mtimes, sorted entries).
  local bin=$1 w="$CACHE/src/pause-$PAUSE_KEY"
  rm -rf "$w"; mkdir -p "$w"; cp "$HERE/pause/main.go" "$w/"; cd "$w"
  go mod init gpuctl.local/pause >/dev/null 2>&1
  go build -ldflags "-s -w" -o "$bin/pause" .
  python3 "$HERE/oci_archive.py" --binary "$bin/pause" --name "$PAUSE_IMAGE" --out "$bin/pause.oci.tar" >"$bin/digest"
  echo "pause image $PAUSE_IMAGE@$(cat "$bin/digest")"
}

build_coredns() {
  # CoreDNS (github.com/coredns/coredns, no replace directives) from a scratch module whose main is
  # coredns.go without the import of every plugin (core/plugin pulls every cloud SDK): coremain plus the
  # plugins the real node's Corefile names. The directive order stays CoreDNS's (core/dnsserver).
  local bin=$1 w="$CACHE/src/coredns-$COREDNS_VERSION" p=github.com/coredns/coredns
  mkdir -p "$w"; cd "$w"
  [[ -f go.mod ]] || go mod init gpuctl.local/corednsbuild >/dev/null
  cat >main.go <<'EOG'
// The local cluster's CoreDNS: coremain and the plugins hack/cluster/real-node.sh's Corefile uses.
package main

import (
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"

	"github.com/coredns/coredns/coremain"
)

func main() { coremain.Run() }
EOG
  go get "$p/coremain@v$COREDNS_VERSION" "$p/plugin/errors@v$COREDNS_VERSION" \
    "$p/plugin/health@v$COREDNS_VERSION" "$p/plugin/kubernetes@v$COREDNS_VERSION" "$p/plugin/log@v$COREDNS_VERSION" \
    "$p/plugin/ready@v$COREDNS_VERSION"
  go build -ldflags "-s -w" -o "$bin/coredns" .
  "$bin/coredns" -version | sed -n 1p  # sed reads it all: head would end the pipe early (SIGPIPE, exit 141 under pipefail)
}

build_etcd() {
  local bin=$1 w="$CACHE/src/etcd-$ETCD_VERSION"
  mkdir -p "$w"; cd "$w"
  [[ -f go.mod ]] || go mod init gpuctl.local/etcdbuild >/dev/null
  go get "go.etcd.io/etcd/server/v3@v$ETCD_VERSION"
  go build -ldflags "-s -w" -o "$bin/etcd" go.etcd.io/etcd/server/v3
}

build_kwok() {
  # kwok's version list is served, so plain `go install` works here.
  GOBIN=$1 go install -ldflags "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=$KWOK_VERSION" \
    "sigs.k8s.io/kwok/cmd/kwok@v$KWOK_VERSION"
}

build_kueue() {
  # Not `go install kueue@v`: that asks the proxy for Kueue's version list (deprecation check),
  # which proxy.golang.org answers 403. Build the module's own main from a copy of its source,
  # as Kueue's Makefile does; its go.sum pins everything.
  local bin=$1 dir w="$CACHE/src/kueue-$KUEUE_VERSION"
  dir=$(go mod download -json "sigs.k8s.io/kueue@v$KUEUE_VERSION" | python3 -c 'import sys,json;print(json.load(sys.stdin)["Dir"])')
  rm -rf "$w"; mkdir -p "$w"; cp -r "$dir"/. "$w"/; chmod -R u+w "$w"; cd "$w"
  go build -ldflags "-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=v$KUEUE_VERSION" -o "$bin/kueue" ./cmd/kueue
}

build_kueuectl() {
  # kueuectl (kubectl-kueue), Kueue's CLI, from the same module source as the controller, as its Makefile's
  # `kueuectl` target builds it: tests/integration/test_stop_estimate.py checks that its `stop|resume
  # workload` and gpuctl's `stop|resume` read the same.
  local bin=$1 dir w="$CACHE/src/kueuectl-$KUEUE_VERSION"
  dir=$(go mod download -json "sigs.k8s.io/kueue@v$KUEUE_VERSION" | python3 -c 'import sys,json;print(json.load(sys.stdin)["Dir"])')
  rm -rf "$w"; mkdir -p "$w"; cp -r "$dir"/. "$w"/; chmod -R u+w "$w"; cd "$w"
  go build -ldflags "-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=v$KUEUE_VERSION" -o "$bin/kubectl-kueue" ./cmd/kueuectl
  "$bin/kubectl-kueue" version 2>/dev/null | head -1 || true
}

build_jobset() {
  # The JobSet controller (sigs.k8s.io/jobset, its main package at the module root), built like Kueue from
  # a copy of its module source: its go.sum pins everything. The version is the one Kueue's integration
  # is built against (Kueue's go.mod), so the CRDs Kueue's jobset integration reads are the ones installed.
  local bin=$1 dir w="$CACHE/src/jobset-$JOBSET_VERSION"
  dir=$(go mod download -json "sigs.k8s.io/jobset@v$JOBSET_VERSION" | python3 -c 'import sys,json;print(json.load(sys.stdin)["Dir"])')
  rm -rf "$w"; mkdir -p "$w"; cp -r "$dir"/. "$w"/; chmod -R u+w "$w"; cd "$w"
  go build -ldflags "-s -w" -o "$bin/jobset" .
}

build_lws() {
  # The LeaderWorkerSet controller (sigs.k8s.io/lws, its main package in cmd/), built like JobSet from a copy
  # of its module source, at the version Kueue's leaderworkerset integration is built against.
  local bin=$1 dir w="$CACHE/src/lws-$LWS_VERSION"
  dir=$(go mod download -json "sigs.k8s.io/lws@v$LWS_VERSION" | python3 -c 'import sys,json;print(json.load(sys.stdin)["Dir"])')
  rm -rf "$w"; mkdir -p "$w"; cp -r "$dir"/. "$w"/; chmod -R u+w "$w"; cd "$w"
  go build -ldflags "-s -w" -o "$bin/lws" ./cmd
}

build_prometheus_adapter() {
  # prometheus-adapter (sigs.k8s.io/prometheus-adapter), its cmd/adapter from a copy of its module source
  # like Kueue: its go.sum pins everything. Chosen over KEDA (docs/serving.md, "Why prometheus-adapter"):
  # about 2 min here against KEDA's module, which pulls every cloud SDK.
  local bin=$1 dir w="$CACHE/src/prometheus-adapter-$PROMETHEUS_ADAPTER_VERSION"
  dir=$(go mod download -json "sigs.k8s.io/prometheus-adapter@v$PROMETHEUS_ADAPTER_VERSION" | python3 -c 'import sys,json;print(json.load(sys.stdin)["Dir"])')
  rm -rf "$w"; mkdir -p "$w"; cp -r "$dir"/. "$w"/; chmod -R u+w "$w"; cd "$w"
  go build -ldflags "-s -w" -o "$bin/adapter" ./cmd/adapter
}

build_helm() {
  # helm's version list is served, so plain `go install` works; the version stamp is what its Makefile sets.
  GOBIN=$1 go install -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=v$HELM_VERSION \
    -X helm.sh/helm/v4/internal/version.gitTreeState=clean" "helm.sh/helm/v4/cmd/helm@v$HELM_VERSION"
  "$1/helm" version --short
}

kind_source() { # a writable copy of kind's module (its internal config packages are importable only under its pkg/)
  local dir w="$CACHE/src/kind-$KIND_VERSION"
  if [[ ! -f "$w/go.mod" ]]; then
    dir=$(go mod download -json "sigs.k8s.io/kind@v$KIND_VERSION" | python3 -c 'import sys,json;print(json.load(sys.stdin)["Dir"])')
    rm -rf "$w"; mkdir -p "$w"; cp -r "$dir"/. "$w"/; chmod -R u+w "$w"
  fi
  echo "$w"
}

build_kind_validate() {
  local w; w=$(kind_source)
  mkdir -p "$w/pkg/gpuctl-kind-validate"
  cat >"$w/pkg/gpuctl-kind-validate/main.go" <<'EOF'
// gpuctl-kind-validate: load kind cluster configs exactly as `kind create cluster --config` does (strict
// decoding, defaults, conversion) and run kind's Validate, without a container runtime.
package main

import (
	"fmt"
	"os"

	"sigs.k8s.io/kind/pkg/internal/apis/config/encoding"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: kind-validate CONFIG...")
		os.Exit(2)
	}
	for _, f := range os.Args[1:] {
		cfg, err := encoding.Load(f)
		if err == nil {
			err = cfg.Validate()
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: invalid kind config: %v\n", f, err)
			os.Exit(1)
		}
		fmt.Printf("%s: valid kind config, cluster %q, %d nodes\n", f, cfg.Name, len(cfg.Nodes))
	}
}
EOF
  (cd "$w" && go build -ldflags "-s -w" -o "$1/kind-validate" ./pkg/gpuctl-kind-validate)
}

build_celeval() {
  # hack/celeval's own module (go.mod and go.sum pin k8s.io/apiserver at the control plane's version), built
  # with the control plane's tags after it: every package but main comes from the Go build cache (seconds).
  local bin=$1 w="$CACHE/src/celeval-$CELEVAL_KEY"
  rm -rf "$w"; mkdir -p "$w"; cp "$HERE/../celeval/main.go" "$HERE/../celeval/go.mod" "$HERE/../celeval/go.sum" "$w/"
  cd "$w"
  go build -mod=readonly -tags selinux,notest,grpcnotrace -ldflags "-s -w" -o "$bin/celeval" .
}

build_kind() {
  local w; w=$(kind_source)
  (cd "$w" && go build -ldflags "-s -w" -o "$1/kind" .)
}

T0=$(date +%s)
PAUSE_KEY=$(cat "$HERE/pause/main.go" "$HERE/oci_archive.py" | sha256sum | cut -c1-16)
PAUSE_IMAGE="localhost/gpuctl-testbed/pause:$PAUSE_KEY"
CELEVAL_KEY=$(cd "$HERE/../celeval" && cat main.go go.mod go.sum | sha256sum | cut -c1-16)
# Two lanes at once: a Go build keeps 2 cores busy only while it compiles (module downloads and the
# single-threaded links of kube-apiserver and kueue leave one idle). Cold, on 2 cores: 1,063 s one step
# after another (1.3 cores busy), 850 s in two lanes (1.85). Each lane's steps use their own scratch
# modules; the Go caches are safe to share.
lane_kubernetes() {
  step "kubernetes $K8S_VERSION" "$CACHE/bin/k8s-$K8S_VERSION" build_k8s
  step "celeval $CELEVAL_KEY" "$CACHE/bin/celeval-$CELEVAL_KEY" build_celeval
  if [[ "${GPUCTL_BUILD_REAL_NODE:-0}" == 1 ]]; then
    step "kubelet $K8S_VERSION" "$CACHE/bin/kubelet-$K8S_VERSION" build_kubelet
  fi
  step "helm $HELM_VERSION" "$CACHE/bin/helm-$HELM_VERSION" build_helm
  step "kind-validate $KIND_VERSION" "$CACHE/bin/kind-validate-$KIND_VERSION" build_kind_validate
  if [[ "${GPUCTL_BUILD_KIND:-0}" == 1 ]]; then step "kind $KIND_VERSION" "$CACHE/bin/kind-$KIND_VERSION" build_kind; fi
}
lane_kueue() {
  step "etcd $ETCD_VERSION" "$CACHE/bin/etcd-$ETCD_VERSION" build_etcd
  step "kwok $KWOK_VERSION" "$CACHE/bin/kwok-$KWOK_VERSION" build_kwok
  step "kueue $KUEUE_VERSION" "$CACHE/bin/kueue-$KUEUE_VERSION" build_kueue
  step "kueuectl $KUEUE_VERSION" "$CACHE/bin/kueuectl-$KUEUE_VERSION" build_kueuectl
  step "jobset $JOBSET_VERSION" "$CACHE/bin/jobset-$JOBSET_VERSION" build_jobset
  step "lws $LWS_VERSION" "$CACHE/bin/lws-$LWS_VERSION" build_lws
  step "prometheus-adapter $PROMETHEUS_ADAPTER_VERSION" "$CACHE/bin/prometheus-adapter-$PROMETHEUS_ADAPTER_VERSION" build_prometheus_adapter
  if [[ "${GPUCTL_BUILD_REAL_NODE:-0}" == 1 ]]; then
    step "pause image $PAUSE_KEY" "$CACHE/bin/pause-$PAUSE_KEY" build_pause
    step "coredns $COREDNS_VERSION" "$CACHE/bin/coredns-$COREDNS_VERSION" build_coredns
  fi
}
# Every hack/cluster/up.sh runs this script (the suite starts up to seven clusters, three at once): when
# every step of the lanes is cached and dirs.env was written for these versions, it returns at once,
# without the lock (which serialized the clusters' starts) and without a go command.
DIRS_KEY=$(cat "$HERE/versions.env" <(echo "$PAUSE_KEY ${GOMODCACHE:-} ${GOPATH:-}") | sha256sum | cut -c1-16)
dirs_current() {
  [[ "$(head -n 1 "$CACHE/dirs.env" 2>/dev/null)" == "# key $DIRS_KEY" ]] || return 1
  local d
  for d in $(sed -n '/^PAUSE_/!s/^[A-Z]*_DIR=//p' "$CACHE/dirs.env"); do [[ -d "$d" ]] || return 1; done  # module sources
}
CHECK_ONLY=1; lane_kubernetes; lane_kueue; CHECK_ONLY=0
if (( ${#MISSING[@]} == 0 )) && dirs_current; then echo "build: every binary cached under $CACHE/bin"; exit 0; fi

exec 9>"$CACHE/build.lock"
if ! flock -n 9; then
  echo "build: another build holds $CACHE/build.lock; waiting"
  flock 9
fi
# Each lane in a subshell (the build functions cd); a failed step fails its lane (set -e) and the build.
(lane_kubernetes) & lane_a=$!
(lane_kueue) & lane_b=$!
rc=0
wait "$lane_a" || rc=$?
wait "$lane_b" || rc=$?
if (( rc != 0 )); then echo "build: a step failed (exit $rc); see above" >&2; exit "$rc"; fi
{
  echo "# key $DIRS_KEY"
  echo "KUEUE_DIR=$(go mod download -json "sigs.k8s.io/kueue@v$KUEUE_VERSION" | python3 -c 'import sys,json;print(json.load(sys.stdin)["Dir"])')"
  echo "PAUSE_DIR=$CACHE/bin/pause-$PAUSE_KEY"
  echo "JOBSET_DIR=$(go mod download -json "sigs.k8s.io/jobset@v$JOBSET_VERSION" | python3 -c 'import sys,json;print(json.load(sys.stdin)["Dir"])')"
  echo "LWS_DIR=$(go mod download -json "sigs.k8s.io/lws@v$LWS_VERSION" | python3 -c 'import sys,json;print(json.load(sys.stdin)["Dir"])')"
  echo "PAUSE_IMAGE=$PAUSE_IMAGE"
  echo "KWOK_DIR=$(go mod download -json "sigs.k8s.io/kwok@v$KWOK_VERSION" | python3 -c 'import sys,json;print(json.load(sys.stdin)["Dir"])')"
} > "$CACHE/dirs.env.tmp" && mv "$CACHE/dirs.env.tmp" "$CACHE/dirs.env"
echo "build: all binaries ready in $(( $(date +%s) - T0 ))s under $CACHE/bin"
