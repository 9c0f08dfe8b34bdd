package e2e

import "github.com/cozystack/computeplane/internal/devenv"

// chartsNamespace holds the ExternalArtifacts the suite's charts are served as.
const chartsNamespace = "flux-charts"

// charts are the Helm charts the suite installs, by name: each a Chart.yaml and
// templates.
var charts = map[string]devenv.Chart{
	// app: one ConfigMap named like the release, holding the value it was given.
	"app": {
		"templates/configmap.yaml": `apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}
data:
  value: {{ .Values.value | default "v1" | quote }}
`,
	},
	// leftovers: what Helm's uninstall leaves: an object the chart keeps, and the
	// objects of hooks that have no delete policy, beside one ordinary ConfigMap.
	"leftovers": {
		"templates/objects.yaml": `apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}
data:
  value: ordinary
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}-kept
  annotations:
    helm.sh/resource-policy: keep
data:
  value: kept
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: {{ .Release.Name }}-kept
  annotations:
    helm.sh/resource-policy: keep
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}-hook
  annotations:
    helm.sh/hook: post-install
data:
  value: hook
---
apiVersion: v1
kind: Secret
metadata:
  name: {{ .Release.Name }}-pre-delete
  annotations:
    helm.sh/hook: pre-delete
stringData:
  value: made by the uninstall itself
`,
	},
	// clusterwide: a ClusterRole, which no deployer may create.
	"clusterwide": {
		"templates/clusterrole.yaml": `apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: {{ .Release.Name }}-escalate
rules:
  - apiGroups: ["*"]
    resources: ["*"]
    verbs: ["*"]
`,
	},
}
