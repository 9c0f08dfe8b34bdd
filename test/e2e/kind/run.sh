#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
#
# The kind end-to-end path: a real management cluster (kind, Cilium, cert-manager, KubeVirt
# with software emulation, CDI, Kamaji, Cluster API with the KubeVirt and Kamaji providers,
# Flux), the operator from its Helm chart, one real ComputePlane with one VM, a placement
# release applied into it as the deployer, the plane's VMs kept away from the management API
# server, and a teardown that leaves nothing behind.
#
#   run.sh plan                print every command `up` runs, in order; needs no Docker,
#                              kind, kubectl or network (also: run.sh --dry-run)
#   run.sh up                  run every step (needs Docker; pinned tools are downloaded)
#   run.sh down                delete the kind cluster
#   run.sh steps               list the steps
#   run.sh step NAME...        run these steps against the existing cluster
#   run.sh from NAME           run NAME and every step after it against the existing cluster
#   run.sh --dry-run MODE ...  print what MODE would run
#
# Every command goes through run(), capture() or a check helper, which print it and, unless
# this is a dry run, run it: the plan is what runs. Versions live in versions.env.
#
# Environment: KIND_E2E_CLUSTER (kind cluster name, default computeplane-e2e),
# KIND_E2E_PLANE_TIMEOUT (wait for the plane's Ready, default 60m),
# KIND_E2E_PLANE_PORT (local port forwarded to the plane's API server, default 16443).
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$SCRIPT_DIR/../../.." && pwd)
# shellcheck source=versions.env
source "$SCRIPT_DIR/versions.env"

CLUSTER=${KIND_E2E_CLUSTER:-computeplane-e2e}
CACHE_DIR=${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/computeplane/kind-e2e
BIN_DIR=$CACHE_DIR/bin
# Manifests, kubeconfigs and logs of one cluster; kept after a run for a look.
WORK_DIR=$CACHE_DIR/work/$CLUSTER
PLANE_TIMEOUT=${KIND_E2E_PLANE_TIMEOUT:-60m}
PLANE_PORT=${KIND_E2E_PLANE_PORT:-16443}

# What the test creates on the management cluster.
TENANT_NS=tenant-e2e
PLANE=e2e
CLASS=kind-e2e
OPERATOR_NS=computeplane-system
ADDONS_NS=computeplane-addons
OPERATOR_IMAGE=computeplane:e2e
PROBE=mgmt-reachability
# Flux impersonates this identity in the plane for every placement release of TENANT_NS
# (README: Identities); the placement namespace named like TENANT_NS is its home.
DEPLOYER=system:serviceaccount:$TENANT_NS:computeplane-deployer
UID_LABEL=computeplane.cozystack.io/uid

export KUBECONFIG=$WORK_DIR/kubeconfig
export PATH=$BIN_DIR:$PATH

STEPS=(tools cluster cilium cert_manager kubevirt cdi kamaji cluster_api flux operator plane placement workload isolation teardown)

DRY=0          # 1: print commands, run nothing
DIAGNOSE=0     # 1 once the cluster exists: dump its state when a step fails
PF_PID=""      # the port-forward to the plane's API server
WATCH_PID=""   # a background watch that narrates a long wait

# ---------------------------------------------------------------------------------------
# Running commands. The plan and the run are the same calls.

# quote prints its arguments as one shell line: plain words bare, anything else quoted.
quote() {
  local plain='^[-A-Za-z0-9_./:=@%+,]+$' a out=()
  for a in "$@"; do
    if [[ $a =~ $plain ]]; then
      out+=("$a")
    else
      out+=("'${a//\'/\'\\\'\'}'")
    fi
  done
  printf '%s' "${out[*]}"
}

# announce prints a command: on stdout in the plan, on stderr (the log) in a run, so that
# capture's command substitution only gets the command's own output.
announce() {
  if ((DRY)); then
    printf '+ %s\n' "$(quote "$@")"
  else
    printf '+ %s\n' "$(quote "$@")" >&2
  fi
}

run() {
  announce "$@"
  if ((DRY)); then return 0; fi
  "$@"
}

# capture VAR cmd...: runs cmd and stores its output in VAR; a dry run stores <VAR>.
capture() {
  local var=$1 out
  shift
  announce "$@"
  if ((DRY)); then
    printf -v "$var" '<%s>' "$var"
    return 0
  fi
  out=$("$@")
  printf -v "$var" '%s' "$out"
}

# capture_any VAR cmd...: as capture, for commands whose answer is in their output even
# when they exit non-zero (kubectl auth can-i says "no" and exits 1).
capture_any() {
  local var=$1 out
  shift
  announce "$@"
  if ((DRY)); then
    printf -v "$var" '<%s>' "$var"
    return 0
  fi
  out=$("$@" 2>&1) || true
  printf -v "$var" '%s' "$out"
}

# run_to FILE cmd...: runs cmd with its output in FILE (a credential never goes to the log).
run_to() {
  local file=$1
  shift
  if ((DRY)); then
    printf '+ %s > %s\n' "$(quote "$@")" "$file"
    return 0
  fi
  printf '+ %s > %s\n' "$(quote "$@")" "$file" >&2
  (umask 077 && "$@" >"$file")
}

# run_bg VAR LOG cmd...: starts cmd in the background, its pid in VAR, its output in LOG
# (LOG "-": the run's log, for a watch that narrates a long wait).
run_bg() {
  local var=$1 log=$2 line
  shift 2
  if [[ $log == - ]]; then
    line="$(quote "$@") >&2 &"
  else
    line="$(quote "$@") > $log 2>&1 &"
  fi
  if ((DRY)); then
    printf '+ %s\n' "$line"
    return 0
  fi
  printf '+ %s\n' "$line" >&2
  if [[ $log == - ]]; then
    "$@" >&2 &
  else
    "$@" >"$log" 2>&1 &
  fi
  printf -v "$var" '%s' "$!"
}

# retry TRIES DELAY cmd...: for what races something coming up (a webhook's certificate
# being injected, a port-forward starting).
retry() {
  local tries=$1 delay=$2 i
  shift 2
  if ((DRY)); then
    printf '+ %s   # retried up to %s times, %ss apart\n' "$(quote "$@")" "$tries" "$delay"
    return 0
  fi
  announce "$@"
  for ((i = 1; ; i++)); do
    if "$@"; then return 0; fi
    if ((i >= tries)); then return 1; fi
    sleep "$delay"
  done
}

# manifest NAME < yaml: writes the manifest the next command applies; the plan shows it.
manifest() {
  local path=$WORK_DIR/$1
  if ((DRY)); then
    printf '  # %s:\n' "$path"
    sed 's/^/  | /'
    return 0
  fi
  cat >"$path"
}

step_header() {
  printf '\n### step %s: %s\n' "$1" "$2"
}

# ---------------------------------------------------------------------------------------
# Checks: one PASS or FAIL line each; the first FAIL ends the run.

pass() { printf 'PASS: %s\n' "$1"; }
fail() {
  printf 'FAIL: %s\n' "$1"
  exit 1
}
planned() { printf 'CHECK: %s\n' "$1"; }

# check DESC cmd...: cmd must succeed.
check() {
  local desc=$1
  shift
  announce "$@"
  if ((DRY)); then planned "$desc"; return 0; fi
  if "$@"; then pass "$desc"; else fail "$desc"; fi
}

# check_gone DESC cmd...: cmd must fail with NotFound (the object is gone).
check_gone() {
  local desc=$1 out
  shift
  announce "$@"
  if ((DRY)); then planned "$desc"; return 0; fi
  if out=$("$@" 2>&1); then
    fail "$desc (still there: $out)"
  elif [[ $out == *NotFound* || $out == *"not found"* ]]; then
    pass "$desc"
  else
    fail "$desc (the lookup failed for another reason: $out)"
  fi
}

# check_empty DESC cmd...: cmd must succeed and print nothing (a list with no items).
check_empty() {
  local desc=$1 out
  shift
  announce "$@"
  if ((DRY)); then planned "$desc"; return 0; fi
  if ! out=$("$@"); then fail "$desc (the lookup failed)"; fi
  if [[ -n $out ]]; then fail "$desc (found: ${out//$'\n'/ })"; fi
  pass "$desc"
}

# check_nonempty DESC cmd...: cmd must succeed and print something.
check_nonempty() {
  local desc=$1 out
  shift
  announce "$@"
  if ((DRY)); then planned "$desc"; return 0; fi
  if ! out=$("$@"); then fail "$desc (the lookup failed)"; fi
  if [[ -z $out ]]; then fail "$desc (found nothing)"; fi
  pass "$desc"
}

# check_eq DESC ACTUAL WANT: compares a value captured before.
check_eq() {
  if ((DRY)); then planned "$1 (want: $3)"; return 0; fi
  if [[ $2 == "$3" ]]; then pass "$1"; else fail "$1 (got: $2, want: $3)"; fi
}

# check_contains DESC TEXT WANT / check_lacks DESC TEXT UNWANTED: on a captured text.
check_contains() {
  if ((DRY)); then planned "$1 (output has: $3)"; return 0; fi
  if [[ $2 == *"$3"* ]]; then pass "$1"; else fail "$1 (no \"$3\" in: ${2//$'\n'/ | })"; fi
}
check_lacks() {
  if ((DRY)); then planned "$1 (output lacks: $3)"; return 0; fi
  if [[ $2 != *"$3"* ]]; then pass "$1"; else fail "$1 (\"$3\" in: ${2//$'\n'/ | })"; fi
}

# ---------------------------------------------------------------------------------------
# Steps.

step_tools() {
  step_header tools "Docker, and the pinned kind, kubectl, helm and clusterctl in $BIN_DIR"
  if ((!DRY)); then
    local tool
    for tool in docker curl tar; do
      command -v "$tool" >/dev/null || fail "$tool is needed on PATH"
    done
  fi
  run mkdir -p "$BIN_DIR" "$WORK_DIR"
  # Docker is the one tool that cannot be downloaded: kind runs the cluster in it.
  run docker version --format '{{.Server.Version}}'
  local os arch
  os=$(uname -s | tr '[:upper:]' '[:lower:]')
  case $(uname -m) in
    x86_64 | amd64) arch=amd64 ;;
    aarch64 | arm64) arch=arm64 ;;
    *) fail "unsupported machine $(uname -m)" ;;
  esac
  fetch_tool kind "$KIND_VERSION" "https://kind.sigs.k8s.io/dl/$KIND_VERSION/kind-$os-$arch"
  fetch_tool kubectl "$KUBECTL_VERSION" "https://dl.k8s.io/release/$KUBECTL_VERSION/bin/$os/$arch/kubectl"
  fetch_tool helm "$HELM_VERSION" "https://get.helm.sh/helm-$HELM_VERSION-$os-$arch.tar.gz" "$os-$arch/helm"
  fetch_tool clusterctl "$CAPI_VERSION" "https://github.com/kubernetes-sigs/cluster-api/releases/download/$CAPI_VERSION/clusterctl-$os-$arch"
  run kind version
  run kubectl version --client
  run helm version
  run clusterctl version
}

# fetch_tool NAME VERSION URL [MEMBER]: the pinned binary is downloaded once into BIN_DIR
# (MEMBER: its path inside a .tar.gz) and linked as NAME, ahead of anything else on PATH,
# so the run never depends on what the machine happens to have. A dry run shows the
# download a fresh machine makes.
fetch_tool() {
  local name=$1 version=$2 url=$3 member=${4:-} bin
  bin=$BIN_DIR/$name-$version
  if ((DRY)) || [[ ! -x $bin ]]; then
    if [[ -z $member ]]; then
      run curl -fsSL --retry 3 -o "$bin.tmp" "$url"
    else
      run curl -fsSL --retry 3 -o "$bin.tar.gz" "$url"
      run tar -xzf "$bin.tar.gz" -C "$BIN_DIR" "$member"
      run mv "$BIN_DIR/$member" "$bin.tmp"
      run rm -rf "$bin.tar.gz" "$BIN_DIR/${member%%/*}"
    fi
    run chmod +x "$bin.tmp"
    run mv "$bin.tmp" "$bin"
  fi
  run ln -sfn "$bin" "$BIN_DIR/$name"
}

step_cluster() {
  step_header cluster "a kind cluster without its default CNI and kube-proxy"
  manifest kind.yaml <<EOF
kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
name: $CLUSTER
networking:
  # Cilium is the CNI and replaces kube-proxy: the operator's egress policies are
  # CiliumNetworkPolicies, and the kube-apiserver entity they deny covers the kubernetes
  # Service's ClusterIP because Cilium translates it before policy.
  disableDefaultCNI: true
  kubeProxyMode: none
  # Away from Kamaji's defaults for the planes (pods 10.244.0.0/16, Services
  # 10.96.0.0/16), so an address seen from inside a plane never means two things: the
  # management kubernetes Service is 10.30.0.1 and cannot be the plane's own.
  podSubnet: 10.20.0.0/16
  serviceSubnet: 10.30.0.0/16
nodes:
  - role: control-plane
    image: $KIND_NODE_IMAGE
EOF
  run kind create cluster --name "$CLUSTER" --config "$WORK_DIR/kind.yaml" --kubeconfig "$KUBECONFIG" --wait 0s
  DIAGNOSE=1
}

step_cilium() {
  step_header cilium "Cilium $CILIUM_VERSION as CNI and kube-proxy replacement"
  # socketLB.hostNamespaceOnly: a KubeVirt VM's packets do not come from a socket in its
  # pod, so Services must be translated per packet at the pod's interface, or the VMs
  # reach no ClusterIP (not their own control plane's either).
  run helm upgrade --install cilium oci://quay.io/cilium/charts/cilium --version "$CILIUM_VERSION" \
    --namespace kube-system \
    --set kubeProxyReplacement=true \
    --set k8sServiceHost="$CLUSTER-control-plane" --set k8sServicePort=6443 \
    --set socketLB.hostNamespaceOnly=true \
    --set ipam.mode=kubernetes \
    --set operator.replicas=1
  run kubectl -n kube-system rollout status daemonset/cilium --timeout=10m
  run kubectl -n kube-system rollout status deployment/cilium-operator --timeout=10m
  run kubectl wait --for=condition=Ready node --all --timeout=10m
}

step_cert_manager() {
  step_header cert_manager "cert-manager $CERT_MANAGER_VERSION"
  run kubectl apply --server-side -f "https://github.com/cert-manager/cert-manager/releases/download/$CERT_MANAGER_VERSION/cert-manager.yaml"
  run kubectl -n cert-manager wait --for=condition=Available deployment --all --timeout=5m
}

step_kubevirt() {
  step_header kubevirt "KubeVirt $KUBEVIRT_VERSION with software emulation"
  local url=https://github.com/kubevirt/kubevirt/releases/download/$KUBEVIRT_VERSION
  run kubectl apply --server-side -f "$url/kubevirt-operator.yaml"
  run kubectl apply --server-side -f "$url/kubevirt-cr.yaml"
  # A kind node has no /dev/kvm: QEMU emulates the CPU (slow, but real VMs).
  run kubectl -n kubevirt patch kubevirt kubevirt --type=merge \
    -p '{"spec":{"configuration":{"developerConfiguration":{"useEmulation":true}}}}'
  run kubectl -n kubevirt wait kubevirt/kubevirt --for=condition=Available --timeout=20m
}

step_cdi() {
  step_header cdi "CDI $CDI_VERSION (imports the node image into each VM's disk)"
  local url=https://github.com/kubevirt/containerized-data-importer/releases/download/$CDI_VERSION
  run kubectl apply --server-side -f "$url/cdi-operator.yaml"
  run kubectl apply --server-side -f "$url/cdi-cr.yaml"
  run kubectl wait cdi/cdi --for=condition=Available --timeout=20m
}

step_kamaji() {
  step_header kamaji "Kamaji $KAMAJI_IMAGE_TAG (chart $KAMAJI_CHART_VERSION) with its default etcd DataStore"
  # Before clusterctl init: the Kamaji CAPI provider watches TenantControlPlanes and does
  # not start without Kamaji's CRDs.
  run helm upgrade --install kamaji kamaji --repo https://clastix.github.io/charts --version "$KAMAJI_CHART_VERSION" \
    --namespace kamaji-system --create-namespace \
    --set image.tag="$KAMAJI_IMAGE_TAG"
  run kubectl -n kamaji-system wait --for=condition=Available deployment --all --timeout=10m
  # The chart's kamaji-etcd subchart is the DataStore "default" every plane uses.
  run kubectl -n kamaji-system rollout status statefulset/kamaji-etcd --timeout=15m
}

step_cluster_api() {
  step_header cluster_api "Cluster API $CAPI_VERSION, CAPK $CAPK_VERSION, Kamaji provider $KAMAJI_CAPI_PROVIDER_VERSION"
  # cert-manager is already there, so clusterctl keeps it (it installs its own otherwise).
  run clusterctl init \
    --core "cluster-api:$CAPI_VERSION" \
    --bootstrap "kubeadm:$CAPI_VERSION" \
    --control-plane "kamaji:$KAMAJI_CAPI_PROVIDER_VERSION" \
    --infrastructure "kubevirt:$CAPK_VERSION" \
    --wait-providers --wait-provider-timeout 900
}

step_flux() {
  step_header flux "Flux $FLUX_VERSION (source-controller and helm-controller among its controllers)"
  run kubectl apply --server-side -f "https://github.com/fluxcd/flux2/releases/download/$FLUX_VERSION/install.yaml"
  run kubectl -n flux-system wait --for=condition=Available deployment --all --timeout=5m
}

step_operator() {
  step_header operator "the operator: built from this tree, installed from config/helm/computeplane"
  local chart=$REPO_ROOT/config/helm/computeplane
  if ((!DRY)) && [[ ! -f $chart/Chart.yaml ]]; then fail "no chart at $chart"; fi
  run docker build -t "$OPERATOR_IMAGE" "$REPO_ROOT"
  run kind load docker-image "$OPERATOR_IMAGE" --name "$CLUSTER"
  # The chart leaves the Namespace to the installer; config/default enforces restricted.
  manifest operator-namespace.yaml <<EOF
apiVersion: v1
kind: Namespace
metadata:
  name: $OPERATOR_NS
  labels:
    pod-security.kubernetes.io/enforce: restricted
EOF
  run kubectl apply -f "$WORK_DIR/operator-namespace.yaml"
  run helm upgrade --install computeplane "$chart" --namespace "$OPERATOR_NS" \
    --set image.repository="${OPERATOR_IMAGE%%:*}" --set image.tag="${OPERATOR_IMAGE#*:}" \
    --set image.pullPolicy=Never \
    --set certManager.enabled=true
  run kubectl -n "$OPERATOR_NS" wait --for=condition=Ready certificate --all --timeout=5m
  run kubectl -n "$OPERATOR_NS" rollout status deployment/computeplane-controller-manager --timeout=5m
}

step_plane() {
  step_header plane "a tenant namespace, a class suited to kind, and one ComputePlane, until Ready"
  # The class's CNI add-on comes from a Flux source the platform operator keeps.
  manifest addons.yaml <<EOF
apiVersion: v1
kind: Namespace
metadata:
  name: $ADDONS_NS
---
apiVersion: source.toolkit.fluxcd.io/v1
kind: OCIRepository
metadata:
  name: cilium
  namespace: $ADDONS_NS
spec:
  interval: 1h
  url: oci://quay.io/cilium/charts/cilium
  ref:
    tag: "$CILIUM_VERSION"
  layerSelector:
    mediaType: application/vnd.cncf.helm.chart.content.v1.tar+gzip
    operation: copy
EOF
  run kubectl apply -f "$WORK_DIR/addons.yaml"
  run kubectl -n "$ADDONS_NS" wait ocirepository/cilium --for=condition=Ready --timeout=5m

  # Like config/samples/computeplaneclass.yaml, sized for one emulated VM. Internet egress
  # is allowed because the plane's node pulls its images; the management API server stays
  # denied whatever the class says, which is what the isolation step checks.
  manifest class.yaml <<EOF
apiVersion: computeplane.cozystack.io/v1alpha1
kind: ComputePlaneClass
metadata:
  name: $CLASS
spec:
  allowedNamespaces:
    matchLabels:
      computeplane.cozystack.io/tenant: "true"
  kubernetesVersion: $PLANE_KUBERNETES_VERSION
  controlPlane:
    replicas: 1
    serviceType: ClusterIP
  infrastructure:
    placement: DedicatedNamespace
    namespacePrefix: cp-
  addons:
    - name: cilium
      role: CNI
      targetNamespace: kube-system
      chartRef: {kind: OCIRepository, name: cilium, namespace: $ADDONS_NS}
      values:
        # Kamaji's control plane allocates node pod CIDRs and runs kube-proxy in the plane.
        ipam: {mode: kubernetes}
        kubeProxyReplacement: false
        operator: {replicas: 1}
  podSecurity:
    level: restricted
    exemptNamespaces: [kube-system]
  egress:
    internet: Allow
  nodeGroups:
    maxGroups: 1
    maxReplicas: 1
    maxCPU: "2"
    maxMemory: 4Gi
    maxDiskSize: 20Gi
    defaultDiskSize: 20Gi
  placementNamespaces:
    quota:
      requests.cpu: "2"
      requests.memory: 2Gi
      pods: "20"
    limitRange:
      - type: Container
        default: {cpu: 200m, memory: 256Mi}
        defaultRequest: {cpu: 10m, memory: 32Mi}
EOF
  manifest plane.yaml <<EOF
apiVersion: v1
kind: Namespace
metadata:
  name: $TENANT_NS
  labels:
    computeplane.cozystack.io/tenant: "true"
---
apiVersion: computeplane.cozystack.io/v1alpha1
kind: ComputePlane
metadata:
  name: $PLANE
  namespace: $TENANT_NS
spec:
  className: $CLASS
  nodeGroups:
    workers:
      minReplicas: 1
      maxReplicas: 1
      resources: {cpu: "2", memory: 2Gi}
EOF
  # The operator's webhooks answer once cert-manager has injected their CA: retry.
  retry 30 10 kubectl apply -f "$WORK_DIR/class.yaml"
  retry 30 10 kubectl apply -f "$WORK_DIR/plane.yaml"
  # The printer columns (Ready, Reason, Message) narrate the wait in the log.
  run_bg WATCH_PID - kubectl -n "$TENANT_NS" get computeplane "$PLANE" -o wide --watch
  run kubectl wait --for=condition=Ready "computeplane/$PLANE" -n "$TENANT_NS" --timeout="$PLANE_TIMEOUT"
  stop_watch
  run kubectl -n "$TENANT_NS" get computeplane "$PLANE" -o wide

  # Ready opens the gate; it does not wait for nodes (node groups may scale from zero).
  # The placement below needs one, with the plane's CNI running on it.
  connect_plane
  wait_plane_nodes
}

step_placement() {
  step_header placement "a tenant's placement release, applied into the plane"
  manifest placement.yaml <<EOF
apiVersion: source.toolkit.fluxcd.io/v1
kind: OCIRepository
metadata:
  name: podinfo
  namespace: $TENANT_NS
spec:
  interval: 1h
  url: oci://ghcr.io/stefanprodan/charts/podinfo
  ref:
    tag: "$PODINFO_CHART_VERSION"
  layerSelector:
    mediaType: application/vnd.cncf.helm.chart.content.v1.tar+gzip
    operation: copy
---
# The label is all a placement release sets: admission routes it (applier kubeconfig,
# deployer, target and storage namespace). The values make podinfo pass the plane's
# restricted Pod Security.
apiVersion: helm.toolkit.fluxcd.io/v2
kind: HelmRelease
metadata:
  name: podinfo
  namespace: $TENANT_NS
  labels:
    computeplane.cozystack.io/placement: ComputePlane
spec:
  interval: 10m
  releaseName: podinfo
  timeout: 10m
  chartRef:
    kind: OCIRepository
    name: podinfo
  install:
    remediation:
      retries: 3
  values:
    replicaCount: 1
    podSecurityContext:
      # The image's user is a name (app), which the kubelet cannot check is not root.
      runAsNonRoot: true
      runAsUser: 100
      runAsGroup: 101
      seccompProfile: {type: RuntimeDefault}
    securityContext:
      allowPrivilegeEscalation: false
      capabilities: {drop: [ALL]}
EOF
  run kubectl apply -f "$WORK_DIR/placement.yaml"
  run kubectl -n "$TENANT_NS" wait helmrelease/podinfo --for=condition=Ready --timeout=20m
}

step_workload() {
  step_header workload "the release runs in the plane, applied as the deployer and nowhere else"
  connect_plane
  local hr_kubeconfig hr_account managers can
  capture hr_kubeconfig kubectl -n "$TENANT_NS" get helmrelease podinfo -o 'jsonpath={.spec.kubeConfig.secretRef.name}'
  check_eq "admission routed the release through the plane's applier kubeconfig" "$hr_kubeconfig" "$PLANE-applier-kubeconfig"
  capture hr_account kubectl -n "$TENANT_NS" get helmrelease podinfo -o 'jsonpath={.spec.serviceAccountName}'
  check_eq "admission made Flux impersonate the deployer" "$hr_account" computeplane-deployer

  check "podinfo pods are Ready in the plane's placement namespace $TENANT_NS" \
    "${PLANE_KUBECTL[@]}" -n "$TENANT_NS" wait --for=condition=Ready pod -l app.kubernetes.io/name=podinfo --timeout=10m
  check_nonempty "Helm's release record is in the plane's placement namespace" \
    "${PLANE_KUBECTL[@]}" -n "$TENANT_NS" get secret -l owner=helm,name=podinfo -o name
  check_empty "nothing of the release runs on the management cluster" \
    kubectl get deployments -A -l app.kubernetes.io/name=podinfo -o name
  capture managers "${PLANE_KUBECTL[@]}" -n "$TENANT_NS" get deployment -l app.kubernetes.io/name=podinfo \
    -o 'jsonpath={.items[*].metadata.managedFields[*].manager}'
  check_contains "the release's Deployment was written by Flux's helm-controller" "$managers" helm-controller

  # The credential Flux used is the applier kubeconfig the release names: it may only be
  # the deployer, and the deployer only acts in its placement namespaces.
  run_to "$WORK_DIR/applier.kubeconfig" kubectl -n "$TENANT_NS" get secret "$PLANE-applier-kubeconfig" \
    -o 'go-template={{index .data "value" | base64decode}}'
  local server applier=()
  capture server kubectl config view --kubeconfig "$WORK_DIR/applier.kubeconfig" --raw -o 'jsonpath={.clusters[0].cluster.server}'
  applier=(kubectl --kubeconfig "$WORK_DIR/applier.kubeconfig" --server "https://127.0.0.1:$PLANE_PORT" --tls-server-name "$(server_host "$server")")
  check "as the deployer, the applier credential reads the release's Deployment" \
    "${applier[@]}" --as "$DEPLOYER" -n "$TENANT_NS" get deployment -l app.kubernetes.io/name=podinfo -o name
  capture_any can "${applier[@]}" --as "$DEPLOYER" auth can-i create deployments -n "$TENANT_NS"
  check_eq "the deployer may create Deployments in its placement namespace" "${can%%[[:space:]]*}" yes
  capture_any can "${applier[@]}" --as "$DEPLOYER" auth can-i create clusterrolebindings
  check_eq "the deployer may not create ClusterRoleBindings" "${can%%[[:space:]]*}" no
  capture_any can "${applier[@]}" --as "$DEPLOYER" auth can-i create pods -n kube-system
  check_eq "the deployer may not create pods in kube-system" "${can%%[[:space:]]*}" no
  capture_any can "${applier[@]}" auth can-i list deployments -n "$TENANT_NS"
  check_eq "the applier itself may do nothing but impersonate the deployer" "${can%%[[:space:]]*}" no
}

step_isolation() {
  step_header isolation "a pod in the plane cannot reach the management API server"
  connect_plane
  local node_ip service_ip log
  # The management API server as a plane's VM could address it: the kind node's address
  # (where the API server listens) and the kubernetes Service's ClusterIP.
  capture node_ip kubectl get nodes -o 'jsonpath={.items[0].status.addresses[?(@.type=="InternalIP")].address}'
  capture service_ip kubectl -n default get service kubernetes -o 'jsonpath={.spec.clusterIP}'
  manifest probe.yaml <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: $PROBE
  namespace: $TENANT_NS
spec:
  restartPolicy: Never
  automountServiceAccountToken: false
  securityContext:
    runAsNonRoot: true
    runAsUser: 100
    runAsGroup: 101
    seccompProfile: {type: RuntimeDefault}
  containers:
    - name: probe
      image: $CURL_IMAGE
      env:
        - name: TARGETS
          value: "$node_ip:6443 $service_ip:443"
      command: ["/bin/sh", "-c"]
      # The control first: the plane's own API server must answer, so BLOCKED below means
      # blocked and not a pod without a network. Any HTTP answer at all counts as reached.
      args:
        - |
          if curl -sk --connect-timeout 5 --max-time 10 -o /dev/null "https://\$KUBERNETES_SERVICE_HOST:\$KUBERNETES_SERVICE_PORT/version"; then
            echo "CONTROL ok"
          else
            echo "CONTROL failed rc=\$?"
          fi
          for t in \$TARGETS; do
            if curl -sk --connect-timeout 5 --max-time 10 -o /dev/null "https://\$t/version"; then
              echo "REACHED \$t"
            else
              echo "BLOCKED \$t rc=\$?"
            fi
          done
      securityContext:
        allowPrivilegeEscalation: false
        readOnlyRootFilesystem: true
        capabilities: {drop: [ALL]}
      resources:
        requests: {cpu: 10m, memory: 16Mi}
        limits: {cpu: 200m, memory: 64Mi}
EOF
  # Created as the deployer: what any placement release's chart could do.
  run "${PLANE_KUBECTL[@]}" --as "$DEPLOYER" -n "$TENANT_NS" delete pod "$PROBE" --ignore-not-found --wait=true
  run "${PLANE_KUBECTL[@]}" --as "$DEPLOYER" apply -f "$WORK_DIR/probe.yaml"
  run "${PLANE_KUBECTL[@]}" -n "$TENANT_NS" wait "pod/$PROBE" --for=jsonpath='{.status.phase}'=Succeeded --timeout=10m
  capture log "${PLANE_KUBECTL[@]}" -n "$TENANT_NS" logs "$PROBE"
  check_contains "the probe reaches its own plane's API server (its network works)" "$log" "CONTROL ok"
  check_contains "the plane cannot reach the management API server at the node, $node_ip:6443" "$log" "BLOCKED $node_ip:6443"
  check_contains "the plane cannot reach the management kubernetes Service, $service_ip:443" "$log" "BLOCKED $service_ip:443"
  check_lacks "the plane reached nothing of the management cluster" "$log" "REACHED"
  run "${PLANE_KUBECTL[@]}" --as "$DEPLOYER" -n "$TENANT_NS" delete pod "$PROBE" --wait=false
}

step_teardown() {
  step_header teardown "delete the ComputePlane; nothing of it may remain"
  local uid infra
  capture uid kubectl -n "$TENANT_NS" get computeplane "$PLANE" -o 'jsonpath={.metadata.uid}'
  capture infra kubectl -n "$TENANT_NS" get computeplane "$PLANE" -o 'jsonpath={.status.infrastructureNamespace}'
  stop_port_forward
  run kubectl -n "$TENANT_NS" delete computeplane "$PLANE" --wait=false
  # The stages (README: Teardown) narrate the wait: Reconciling's reason is the stage.
  run_bg WATCH_PID - kubectl -n "$TENANT_NS" get computeplane "$PLANE" -o wide --watch
  run kubectl -n "$TENANT_NS" wait --for=delete "computeplane/$PLANE" --timeout=30m
  stop_watch
  run kubectl wait --for=delete "namespace/$infra" --timeout=10m
  check_gone "the ComputePlane is gone" kubectl -n "$TENANT_NS" get computeplane "$PLANE"
  check_gone "the infrastructure namespace $infra is gone" kubectl get namespace "$infra"
  check_empty "no Cluster API Cluster of the plane remains" \
    kubectl get clusters.cluster.x-k8s.io -A -l "$UID_LABEL=$uid" -o name
  check_empty "no Machine of the plane remains" \
    kubectl get machines.cluster.x-k8s.io -A -l "$UID_LABEL=$uid" -o name
  check_empty "no KubeVirt VM of the plane remains" \
    kubectl get virtualmachines.kubevirt.io -A -l "$UID_LABEL=$uid" -o name
  check_empty "no CiliumNetworkPolicy of the plane remains" \
    kubectl get ciliumnetworkpolicies.cilium.io -A -l "$UID_LABEL=$uid" -o name
  check_empty "no HelmRelease of the plane remains (add-ons)" \
    kubectl get helmreleases.helm.toolkit.fluxcd.io -A -l "$UID_LABEL=$uid" -o name
  check_gone "the placement release was uninstalled and removed" kubectl -n "$TENANT_NS" get helmrelease podinfo
  check_gone "the applier kubeconfig was revoked" kubectl -n "$TENANT_NS" get secret "$PLANE-applier-kubeconfig"
}

# ---------------------------------------------------------------------------------------
# The plane's API, as a platform operator reaches it.

PLANE_KUBECTL=()

# connect_plane fetches the plane's admin kubeconfig where Kamaji writes it (README:
# Provisioning): in the plane's infrastructure namespace (status.infrastructureNamespace),
# the Secret the TenantControlPlane names in status.kubeconfig.admin.secretName, key
# super-admin.svc. Its server is the control plane's in-cluster Service, so the API server
# is reached through a port-forward, with TLS still checked against the Service's name.
connect_plane() {
  if ((${#PLANE_KUBECTL[@]})); then return 0; fi
  local infra secret server
  capture infra kubectl -n "$TENANT_NS" get computeplane "$PLANE" -o 'jsonpath={.status.infrastructureNamespace}'
  capture secret kubectl -n "$infra" get "tenantcontrolplanes.kamaji.clastix.io/$PLANE" -o 'jsonpath={.status.kubeconfig.admin.secretName}'
  run_to "$WORK_DIR/plane-admin.kubeconfig" kubectl -n "$infra" get secret "$secret" \
    -o 'go-template={{index .data "super-admin.svc" | base64decode}}'
  capture server kubectl config view --kubeconfig "$WORK_DIR/plane-admin.kubeconfig" --raw -o 'jsonpath={.clusters[0].cluster.server}'
  run_bg PF_PID "$WORK_DIR/port-forward.log" kubectl -n "$infra" port-forward --address 127.0.0.1 "service/$PLANE" "$PLANE_PORT:6443"
  PLANE_KUBECTL=(kubectl --kubeconfig "$WORK_DIR/plane-admin.kubeconfig" --server "https://127.0.0.1:$PLANE_PORT" --tls-server-name "$(server_host "$server")")
  retry 30 2 "${PLANE_KUBECTL[@]}" get --raw /readyz
}

# server_host prints the host of an https URL: https://name.ns.svc:6443 -> name.ns.svc.
server_host() {
  local h=${1#https://}
  h=${h%%/*}
  printf '%s' "${h%:*}"
}

wait_plane_nodes() {
  # kubectl wait needs a node to exist first: the VM's disk is imported and it boots
  # under emulation, which takes a while.
  local i nodes=""
  if ((DRY)); then
    printf '+ %s   # until it lists a node, up to 30m\n' "$(quote "${PLANE_KUBECTL[@]}" get nodes -o name)"
  else
    announce "${PLANE_KUBECTL[@]}" get nodes -o name
    for ((i = 0; i < 180; i++)); do
      nodes=$("${PLANE_KUBECTL[@]}" get nodes -o name 2>/dev/null) || true
      if [[ -n $nodes ]]; then break; fi
      sleep 10
    done
    [[ -n $nodes ]] || fail "a node joins the plane within 30m"
  fi
  run "${PLANE_KUBECTL[@]}" wait --for=condition=Ready node --all --timeout=30m
  run "${PLANE_KUBECTL[@]}" get nodes -o wide
}

stop_port_forward() {
  if [[ -n $PF_PID ]]; then
    kill "$PF_PID" 2>/dev/null || true
    wait "$PF_PID" 2>/dev/null || true
  fi
  PF_PID=""
  PLANE_KUBECTL=()
}

stop_watch() {
  if [[ -n $WATCH_PID ]]; then
    kill "$WATCH_PID" 2>/dev/null || true
    wait "$WATCH_PID" 2>/dev/null || true
  fi
  WATCH_PID=""
}

# diagnose prints what a failed run needs to be understood; best effort.
diagnose() {
  printf '\n### diagnostics\n' >&2
  local cmd
  for cmd in \
    "kubectl get computeplanes,computeplaneclasses -A -o wide" \
    "kubectl -n $TENANT_NS get computeplane $PLANE -o yaml" \
    "kubectl get clusters.cluster.x-k8s.io,machines.cluster.x-k8s.io,kubevirtmachines.infrastructure.cluster.x-k8s.io -A" \
    "kubectl get tenantcontrolplanes.kamaji.clastix.io,virtualmachines.kubevirt.io,virtualmachineinstances.kubevirt.io,datavolumes.cdi.kubevirt.io -A" \
    "kubectl get helmreleases.helm.toolkit.fluxcd.io,ocirepositories.source.toolkit.fluxcd.io -A" \
    "kubectl get pods -A -o wide" \
    "kubectl get events -A --sort-by=.lastTimestamp" \
    "kubectl -n $OPERATOR_NS logs deployment/computeplane-controller-manager --tail=200"; do
    printf '+ %s\n' "$cmd" >&2
    # shellcheck disable=SC2086 # each line is one simple command, split on spaces
    $cmd >&2 2>&1 || true
  done
}

on_exit() {
  local rc=$?
  stop_watch
  stop_port_forward
  if ((rc != 0 && !DRY && DIAGNOSE)); then diagnose || true; fi
  exit "$rc"
}

# ---------------------------------------------------------------------------------------

usage() {
  cat >&2 <<'EOF'
usage: run.sh plan | up | down | steps | step NAME... | from NAME
       run.sh --dry-run MODE...   print what MODE would run
EOF
}

valid_step() {
  local s
  for s in "${STEPS[@]}"; do [[ $s == "$1" ]] && return 0; done
  return 1
}

# attach points kubectl at the existing kind cluster, for steps run on their own.
attach() {
  if ((!DRY)); then mkdir -p "$WORK_DIR"; fi
  run kind export kubeconfig --name "$CLUSTER" --kubeconfig "$KUBECONFIG"
  DIAGNOSE=1
}

run_steps() {
  local s
  for s in "$@"; do "step_$s"; done
}

main() {
  local mode=${1:-}
  if [[ $mode == --dry-run || $mode == plan ]]; then
    DRY=1
    shift
    mode=${1:-up}
    if [[ $mode == plan ]]; then mode=up; fi
  fi
  if (($#)); then shift; fi
  trap on_exit EXIT
  trap 'exit 130' INT TERM
  if ((DRY)); then
    printf '# kind end-to-end plan (%s): every command, in order; checks print PASS/FAIL when run.\n' "$mode"
  fi

  local steps=() s
  case $mode in
    up) steps=("${STEPS[@]}") ;;
    down)
      step_tools
      run kind delete cluster --name "$CLUSTER"
      return 0
      ;;
    steps)
      printf '%s\n' "${STEPS[@]}"
      return 0
      ;;
    step)
      [[ $# -gt 0 ]] || { usage; exit 2; }
      for s in "$@"; do
        s=${s//-/_}
        valid_step "$s" || { echo "unknown step $s; run.sh steps lists them" >&2; exit 2; }
        steps+=("$s")
      done
      ;;
    from)
      [[ $# -eq 1 ]] || { usage; exit 2; }
      s=${1//-/_}
      valid_step "$s" || { echo "unknown step $s; run.sh steps lists them" >&2; exit 2; }
      local found=0 t
      for t in "${STEPS[@]}"; do
        if [[ $t == "$s" ]]; then found=1; fi
        if ((found)); then steps+=("$t"); fi
      done
      ;;
    *)
      usage
      exit 2
      ;;
  esac

  if [[ ${steps[0]} != tools ]]; then
    # A step on its own still uses the pinned tools, and the cluster made before.
    step_tools
    if [[ ${steps[0]} != cluster ]]; then attach; fi
  fi
  run_steps "${steps[@]}"
  if [[ $mode == up ]] && ((!DRY)); then
    printf '\nPASS: kind end-to-end (the cluster %s is still up: run.sh down deletes it)\n' "$CLUSTER"
  fi
}

main "$@"
