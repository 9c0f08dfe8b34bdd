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
