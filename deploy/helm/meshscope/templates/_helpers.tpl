{{/* Labels of every object: the kustomize bases' and Helm's. */}}
{{- define "meshscope.labels" -}}
app.kubernetes.io/name: {{ .name }}
app.kubernetes.io/part-of: meshscope
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* An image: <repository>/<name>:<tag>[@<digest>]. */}}
{{- define "meshscope.image" -}}
{{- $tag := .root.Values.image.tag | default .root.Chart.AppVersion -}}
{{- printf "%s/%s:%s" (trimSuffix "/" .root.Values.image.repository) .name $tag -}}
{{- with .digest }}@{{ . }}{{ end -}}
{{- end -}}

{{/* The webhook's Service, as the API server calls it. */}}
{{- define "meshscope.clientConfig" -}}
service:
  name: {{ .root.Values.names.webhook }}
  namespace: {{ .root.Release.Namespace }}
  path: {{ .path }}
  port: 443
{{- with .caBundle }}
caBundle: {{ . }}
{{- end }}
{{- end -}}

{{- define "meshscope.namespaceSelector" -}}
{{- if .Values.webhook.namespaceSelector -}}
{{ toYaml .Values.webhook.namespaceSelector }}
{{- else -}}
matchExpressions:
- key: kubernetes.io/metadata.name
  operator: NotIn
  values: {{ concat .Values.webhook.excludedNamespaces (list .Values.istioNamespace .Release.Namespace) | toJson }}
{{- end -}}
{{- end -}}

{{- define "meshscope.rootNamespaceSelector" -}}
{{- if .Values.webhook.rootNamespaceSelector -}}
{{ toYaml .Values.webhook.rootNamespaceSelector }}
{{- else -}}
matchExpressions:
- key: kubernetes.io/metadata.name
  operator: In
  values: {{ list .Values.istioNamespace | toJson }}
{{- end -}}
{{- end -}}

{{- define "meshscope.validateMode" -}}
{{- if not (has .Values.certificates.mode (list "self-signed" "cert-manager")) -}}
{{- fail (printf "certificates.mode must be self-signed or cert-manager, not %q" .Values.certificates.mode) -}}
{{- end -}}
{{- if not (has .Values.webhook.policy (list "warn" "enforce" "off")) -}}
{{- fail (printf "webhook.policy must be warn, enforce or off, not %q" .Values.webhook.policy) -}}
{{- end -}}
{{- end -}}
