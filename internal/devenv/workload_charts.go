package devenv

import "github.com/cozystack/computeplane/internal/devenv/vm"

// WebChart is a tenant's web app for planes with nodes: a Deployment of busybox's httpd
// from the image every VM's disk comes with (vm.BusyboxImage: there is no registry), as
// Pod Security's restricted profile admits it, Ready once its httpd answers the
// kubelet's probe. Its pods are labelled app=<release name>.
func WebChart() Chart {
	return Chart{"templates/deployment.yaml": `apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ .Release.Name }}
spec:
  replicas: 1
  selector: {matchLabels: {app: {{ .Release.Name }}}}
  template:
    metadata: {labels: {app: {{ .Release.Name }}}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: web
        image: ` + vm.BusyboxImage + `
        command: ["/bin/sh", "-c", "mkdir -p /tmp/www && echo hello > /tmp/www/index.html && exec httpd -f -p 8080 -h /tmp/www"]
        securityContext:
          allowPrivilegeEscalation: false
          runAsNonRoot: true
          runAsUser: 65534
          capabilities: {drop: [ALL]}
          seccompProfile: {type: RuntimeDefault}
        readinessProbe:
          httpGet: {path: /, port: 8080}
          periodSeconds: 1
`}
}
