{{/* Labels every object of the release carries, besides those config/default sets. */}}
{{- define "computeplane.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/part-of: computeplane
{{- end }}

{{/* The manager image reference. */}}
{{- define "computeplane.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/*
The webhook serving certificate when cert-manager is not used: the one the release
installed before (so an upgrade does not rotate it under running replicas), or a new
CA and certificate for the webhook Service's names.
*/}}
{{- define "computeplane.selfSignedCert" -}}
{{- $secret := lookup "v1" "Secret" .Release.Namespace "computeplane-webhook-server-cert" -}}
{{- if and $secret (index $secret.data "ca.crt") -}}
ca: {{ index $secret.data "ca.crt" }}
crt: {{ index $secret.data "tls.crt" }}
key: {{ index $secret.data "tls.key" }}
{{- else -}}
{{- $svc := printf "computeplane-webhook-service.%s.svc" .Release.Namespace -}}
{{- $days := int .Values.webhook.selfSigned.validityDays -}}
{{- $ca := genCA "computeplane-webhook-ca" $days -}}
{{- $cert := genSignedCert $svc .Values.webhook.selfSigned.ipAddresses (list $svc (printf "%s.cluster.local" $svc)) $days $ca -}}
ca: {{ $ca.Cert | b64enc }}
crt: {{ $cert.Cert | b64enc }}
key: {{ $cert.Key | b64enc }}
{{- end -}}
{{- end }}
