#!/usr/bin/env bash
# Builds the control plane's binaries (etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
# kubectl, kwok), Argo's workflow-controller, Kubeflow Trainer v2's controller manager, JobSet's
# controller and Kueue's from the Go module proxy at the versions tools/kube (the plane, kwok, Trainer
# and JobSet, in one build on one set of versions), tools/kueue and tools/argo pin, into OUT/<key>/, where <key> hashes those pins,
# this script and the Go version: a build is done once per set of versions and reused after. Beside them,
# kwok-stages.yaml: kwok's own "fast" stages (nodes initialised and kept alive by leases, pods made
# ready, completed and deleted), from its module; its pods of Jobs complete, and so do an Argo
# Workflow's (exit 0, every container, the executor's "wait" among them, as a step that succeeds).
# Prints the folder on its last line.
#   tools/build.sh .cluster/bin
set -euo pipefail
out=$(mkdir -p "${1:?usage: tools/build.sh OUT_DIR}" && cd "$1" && pwd)
tools=$(cd "$(dirname "$0")" && pwd)
key=$( { cat "$tools/kube/go.mod" "$tools/kube/go.sum" "$tools/kube/cmd/etcd/main.go" \
           "$tools/kueue/go.mod" "$tools/kueue/go.sum" "$tools/argo/go.mod" "$tools/argo/go.sum" "$0"
           go version; } | sha256sum | cut -c1-16)
dest="$out/$key"
binaries=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok workflow-controller
          trainer-controller-manager jobset kueue)
complete=yes
for name in "${binaries[@]}"; do [ -x "$dest/$name" ] || complete=no; done
[ -f "$dest/kwok-stages.yaml" ] || complete=no
if [ "$complete" = no ]; then
  mkdir -p "$dest.partial"
  export GOFLAGS="-mod=readonly -trimpath -buildvcs=false" GOWORK=off CGO_ENABLED=0
  started=$(date +%s)
  # The version the binaries report (a module build has no git tree to take it from).
  version=$(cd "$tools/kube" && go list -m -f '{{.Version}}' k8s.io/kubernetes)
  minor=$(echo "$version" | cut -d. -f2)
  stamp=""
  for package in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    stamp="$stamp -X $package.gitVersion=$version -X $package.gitMajor=1 -X $package.gitMinor=$minor"
    stamp="$stamp -X $package.gitTreeState=clean"
  done
  # One build, so every package is compiled once for all of them; the stamp (set when linking)
  # reaches the controllers too, whose client-go then reports the plane's version.
  (cd "$tools/kube" && go build -ldflags="-s -w $stamp" -o "$dest.partial/" \
      k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
      k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl ./cmd/etcd \
      sigs.k8s.io/kwok/cmd/kwok github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager \
      sigs.k8s.io/jobset)
  (cd "$tools/kueue" && go build -ldflags="-s -w" -o "$dest.partial/" sigs.k8s.io/kueue/cmd/kueue)
  (cd "$tools/argo" && go build -ldflags="-s -w" -o "$dest.partial/" \
      github.com/argoproj/argo-workflows/v4/cmd/workflow-controller)
  stages=$(cd "$tools/kube" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)/kustomize/stage
  for stage in node/fast/node-initialize node/heartbeat-with-lease/node-heartbeat-with-lease \
               pod/fast/pod-ready pod/fast/pod-complete pod/fast/pod-delete; do
    printf -- '---\n' && sed "s/^      - 'Job'\$/      - 'Job'\n      - 'Workflow'/" "$stages/$stage.yaml"
  done > "$dest.partial/kwok-stages.yaml"
  grep -q "'Workflow'" "$dest.partial/kwok-stages.yaml"  # kwok's pod-complete stage changed shape
  rm -rf "$dest" && mv "$dest.partial" "$dest"
  find "$out" -mindepth 1 -maxdepth 1 -not -name "$key" -exec rm -rf {} +  # builds of older pins
  echo "built ${binaries[*]} in $(( $(date +%s) - started )) s" >&2
fi
echo "$dest"
