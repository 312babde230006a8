{{/* Common labels. */}}
{{- define "kruise-rs.labels" -}}
app.kubernetes.io/name: kruise-rs
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}

{{/* The manager Pods' selector (OpenKruise's labels, so its dashboards and selectors keep working). */}}
{{- define "kruise-rs.selector" -}}
control-plane: controller-manager
app.kubernetes.io/name: kruise-rs
{{- end }}

{{- define "kruise-rs.namespace" -}}
{{ .Values.installation.namespace }}
{{- end }}

{{- define "kruise-rs.image" -}}
{{ .Values.manager.image.repository }}:{{ .Values.manager.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* Sizing profiles (docs/sizing.md): workers per controller, client QPS/burst/requests in flight, resources. */}}
{{- define "kruise-rs.profiles" -}}
small:
  workers: {cloneset: 3, statefulset: 3, daemonset: 3, sidecarset: 3, uniteddeployment: 2, broadcastjob: 2}
  apiClient: {qps: 500, burst: 1000, maxInFlight: 32}
  resources:
    requests: {cpu: 100m, memory: 128Mi}
    limits: {cpu: "1", memory: 256Mi}
medium:
  workers: {cloneset: 5, statefulset: 5, daemonset: 3, sidecarset: 5, uniteddeployment: 3, broadcastjob: 3}
  apiClient: {qps: 500, burst: 1000, maxInFlight: 32}
  resources:
    requests: {cpu: 250m, memory: 384Mi}
    limits: {cpu: "2", memory: 768Mi}
large:
  workers: {cloneset: 10, statefulset: 10, daemonset: 5, sidecarset: 10, uniteddeployment: 5, broadcastjob: 5}
  apiClient: {qps: 800, burst: 1600, maxInFlight: 64}
  resources:
    requests: {cpu: 500m, memory: 768Mi}
    limits: {cpu: "4", memory: 1536Mi}
{{- end }}

{{/* The profile named by manager.profile with manager.workers/apiClient/resources merged over it. */}}
{{- define "kruise-rs.sizing" -}}
{{- $profiles := include "kruise-rs.profiles" . | fromYaml -}}
{{- $base := get $profiles .Values.manager.profile -}}
{{- $sizing := dict
    "workers" (merge (deepCopy .Values.manager.workers) $base.workers)
    "apiClient" (merge (deepCopy .Values.manager.apiClient) $base.apiClient)
    "resources" (ternary $base.resources .Values.manager.resources (empty .Values.manager.resources)) -}}
{{- toYaml $sizing -}}
{{- end }}

{{/* The namespaces the Pod webhook never sees (as the manager computes them). */}}
{{- define "kruise-rs.podWebhookNamespaceSelector" -}}
matchExpressions:
- key: kubernetes.io/metadata.name
  operator: NotIn
  values:
  {{- $names := list "kube-system" (include "kruise-rs.namespace" .) | uniq | sortAlpha }}
  {{- range $names }}
  - {{ . }}
  {{- end }}
- key: control-plane
  operator: DoesNotExist
{{- end }}

{{/* clientConfig of one webhook path. */}}
{{- define "kruise-rs.clientConfig" -}}
{{- with .root.Values.webhookConfiguration.host }}
url: https://{{ . }}:{{ $.root.Values.manager.webhook.port }}{{ $.path }}
{{- else }}
service:
  name: kruise-webhook-service
  namespace: {{ include "kruise-rs.namespace" .root }}
  path: {{ .path }}
  port: 443
{{- end }}
{{- end }}
