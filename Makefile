# ComputePlane operator. `make help` lists the targets.
SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec

CONTROLLER_GEN ?= go run sigs.k8s.io/controller-tools/cmd/controller-gen@v0.23.0
# The pinned kube-apiserver, kube-controller-manager, kube-scheduler, etcd and kubectl, built once into a cache outside the repo.
TESTBIN = $(shell test/tools/build.sh)
# The pinned Helm CLI (built once, like the above), for the chart.
HELM = $(shell test/tools/helm.sh)
# The real Kamaji manager (v1.0.0, built once, like the above; ~8 min cold).
KAMAJI = $(shell test/tools/kamaji.sh)
# Cluster API's core and kubeadm bootstrap managers, which test/kamajireal's nodes run.
CAPI = $(shell test/tools/capi.sh)
# The cilium-agent and its CNI plugin, which police the VM pods of test/kamajireal's nodes (~10 min and ~3.5 GB cold).
CILIUM = $(shell test/tools/cilium.sh)
IMG ?= ghcr.io/cozystack/computeplane:dev
GO_TEST_FLAGS ?=

.PHONY: help
help: ## Show the targets.
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

.PHONY: generate
generate: ## Generate deep-copy code from the API types.
	$(CONTROLLER_GEN) object paths=./api/...

.PHONY: manifests
manifests: ## Generate the CRDs, RBAC and webhook manifests into config/, and the chart's copy of config/default.
	$(CONTROLLER_GEN) crd paths=./api/... output:crd:artifacts:config=config/crd/bases
	$(CONTROLLER_GEN) rbac:roleName=manager webhook paths=./controllers/... \
		output:rbac:artifacts:config=config/rbac output:webhook:artifacts:config=config/webhook
	$(TESTBIN)/kubectl kustomize config/default > config/helm/computeplane/files/install.yaml

.PHONY: testbin
testbin: ## Build the pinned kube-apiserver, kube-controller-manager, kube-scheduler, etcd and kubectl (once).
	@echo $(TESTBIN)

.PHONY: build
build: ## Build the manager binary into bin/.
	go build -o bin/manager ./cmd/manager

.PHONY: test
test: ## Run every test (unit and envtest on real apiservers) with -race.
	test/tools/modules.sh # the module proxy's occasional 502 fails a lazy fetch: fetch up front, retrying
	test/tools/flux.sh >/dev/null # test/kamajireal runs the real Flux (e2e stays opt-in: make e2e)
	KUBEBUILDER_ASSETS=$(TESTBIN) HELM=$(HELM) KAMAJI_BIN=$(KAMAJI) CLUSTER_API_BIN=$(CAPI) CILIUM_BIN=$(CILIUM) go test -race -count=1 -timeout 20m $(GO_TEST_FLAGS) ./...

.PHONY: demo
demo: ## Run the embedded default: a local management apiserver, the manager and a sample plane.
	test/tools/modules.sh # the module proxy's occasional 502 fails a lazy fetch: fetch up front, retrying
	KUBEBUILDER_ASSETS=$(TESTBIN) HELM=$(HELM) KAMAJI_BIN=$(KAMAJI) CLUSTER_API_BIN=$(CAPI) CILIUM_BIN=$(CILIUM) FLUX_HELM_CONTROLLER=$$(test/tools/flux.sh) go run ./cmd/demo

.PHONY: e2e
e2e: ## Run placement end to end with the real Flux helm-controller (built once, see test/tools/flux.sh), on the dev provider's planes and on a real Kamaji plane.
	test/tools/modules.sh # the module proxy's occasional 502 fails a lazy fetch: fetch up front, retrying
	KUBEBUILDER_ASSETS=$(TESTBIN) FLUX_HELM_CONTROLLER=$$(test/tools/flux.sh) go test -race -count=1 -v -timeout 45m ./test/e2e/...
	KUBEBUILDER_ASSETS=$(TESTBIN) FLUX_HELM_CONTROLLER=$$(test/tools/flux.sh) KAMAJI_BIN=$(KAMAJI) go test -race -count=1 -v -timeout 15m -run '^TestOperatorOnRealKamaji$$' ./test/kamajireal/

.PHONY: burst
burst: ## Run the burst: 1,000 placement releases over 10 planes with flapping gates, real Flux (about 15 min; E2E_BURST=50,20 for 50 planes).
	KUBEBUILDER_ASSETS=$(TESTBIN) FLUX_HELM_CONTROLLER=$$(test/tools/flux.sh) E2E_BURST=$${E2E_BURST:-10,100} go test -race -count=1 -v -timeout 45m -run '^TestBurstWithFlappingGates$$' ./test/e2e/

.PHONY: kind-e2e
kind-e2e: ## Run the kind end-to-end path: real Kamaji/KubeVirt/CAPI/Flux, the Helm chart, one plane (needs Docker; about an hour).
	COMPUTEPLANE_KIND_E2E=1 go test -count=1 -v -timeout 150m -run '^TestKind$$' ./test/e2e/kind/

.PHONY: kind-e2e-check
kind-e2e-check: ## Statically check the kind end-to-end path (bash -n, shellcheck, its plan, go vet); no Docker needed.
	bash test/e2e/kind/check.sh

.PHONY: bench
bench: ## Run the benchmarks against real apiservers and print their figures.
	KUBEBUILDER_ASSETS=$(TESTBIN) FLUX_HELM_CONTROLLER=$$(test/tools/flux.sh) go test -run '^$$' -bench . -benchtime 1x -timeout 60m ./test/bench/... ./test/e2e/...

.PHONY: lint
lint: house-check ## Vet, check formatting, check the house's rules, lint the chart.
	go vet ./...
	test -z "$$(gofmt -l $$(go list -f '{{.Dir}}' ./...) test)"
	$(HELM) lint --strict config/helm/computeplane

.PHONY: chart
chart: ## Render the chart with its defaults (what `helm install` would apply).
	$(HELM) template computeplane config/helm/computeplane --namespace computeplane-system

.PHONY: house
house: ## Regenerate docs/house.md: the packages, their imports, which do I/O.
	go run ./test/tools/house

.PHONY: house-check
house-check: ## Check the rules in docs/house.md (placement and computeplane apart, nothing imports test/, the pure packages do no I/O).
	go run ./test/tools/house -check

.PHONY: image-context
image-context: ## Check without Docker that the image's build context holds the manager's packages and builds it.
	test/tools/image-context.sh

.PHONY: docker-build
docker-build: ## Build the manager image (needs a Docker engine).
	docker build -t $(IMG) .

.PHONY: verify-generated
verify-generated: generate manifests house ## Fail when generated code, manifests or docs/house.md are stale.
	git diff --exit-code -- api config docs/house.md
	git ls-files --error-unmatch docs/house.md >/dev/null || { echo "docs/house.md is not committed"; exit 1; }

.PHONY: faults
faults: ## Run the fault suite: plane apiserver/etcd loss, credential rotation, the manager SIGKILLed at every stage, the management apiserver restarted, and a Kamaji-run control plane killed and renewed (prints each fault's figures).
	KUBEBUILDER_ASSETS=$(TESTBIN) COMPUTEPLANE_FAULTS=1 go test -race -count=1 -v -timeout 30m ./test/faults/...
	KUBEBUILDER_ASSETS=$(TESTBIN) FLUX_HELM_CONTROLLER=$$(test/tools/flux.sh) KAMAJI_BIN=$(KAMAJI) go test -race -count=1 -v -timeout 15m -run '^TestRealKamajiFaults$$' ./test/kamajireal/
