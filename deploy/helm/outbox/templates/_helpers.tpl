{{/* The chart's name, or nameOverride. */}}
{{- define "outbox.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The release's prefix of every object: fullnameOverride, else <release>, or <release>-<chart> when the release is not named after the chart. */}}
{{- define "outbox.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Labels of every object. */}}
{{- define "outbox.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "outbox.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* The pods of one service: (dict "root" $ "name" "vpc"). */}}
{{- define "outbox.selectorLabels" -}}
app.kubernetes.io/name: {{ include "outbox.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .name }}
{{- end -}}

{{- define "outbox.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | toString }}
{{- end -}}

{{/* One service's settings: serviceDefaults with its own entry over them, as a YAML map. (dict "root" $ "name" "vpc") */}}
{{- define "outbox.service" -}}
{{- $own := index .root.Values.services .name | default dict -}}
{{- toYaml (mergeOverwrite (deepCopy .root.Values.serviceDefaults) (deepCopy $own)) -}}
{{- end -}}

{{/* A variable from a key of the credentials Secret. */}}
{{- define "outbox.secretEnv" -}}
- name: {{ .env }}
  valueFrom:
    secretKeyRef:
      name: {{ .root.Values.secret.name }}
      key: {{ .key }}
{{- end -}}

{{/*
The variables every container of the chart gets: the credentials from the Secret (never inline),
OpenFGA, NODE_OPTIONS. (dict "root" $ "direct" bool): direct (the migrations) takes DATABASE_URL
from the direct URL's key when there is one, as pnpm migrate holds a session advisory lock.
*/}}
{{- define "outbox.baseEnv" -}}
{{- $s := .root.Values.secret -}}
{{- $databaseKey := $s.databaseUrlKey -}}
{{- if and .direct $s.listenDatabaseUrlKey -}}{{- $databaseKey = $s.listenDatabaseUrlKey -}}{{- end -}}
{{ include "outbox.secretEnv" (dict "root" .root "env" "DATABASE_URL" "key" $databaseKey) }}
{{- if and (not .direct) $s.listenDatabaseUrlKey }}
{{ include "outbox.secretEnv" (dict "root" .root "env" "LISTEN_DATABASE_URL" "key" $s.listenDatabaseUrlKey) }}
{{- end }}
- name: OPENFGA_API_URL
  value: {{ required "openfga.apiUrl is required" .root.Values.openfga.apiUrl | quote }}
{{- with .root.Values.openfga.storeId }}
- name: OPENFGA_STORE_ID
  value: {{ . | quote }}
{{- end }}
{{- with .root.Values.openfga.modelId }}
- name: OPENFGA_MODEL_ID
  value: {{ . | quote }}
{{- end }}
{{- with $s.openfgaApiTokenKey }}
{{ include "outbox.secretEnv" (dict "root" $.root "env" "OPENFGA_API_TOKEN" "key" .) }}
{{- end }}
{{- with .root.Values.nodeOptions }}
- name: NODE_OPTIONS
  value: {{ . | quote }}
{{- end }}
{{- end -}}

{{/* Plain variables from a map, refusing the credentials (they come from the Secret only). (dict "env" map "where" "env") */}}
{{- define "outbox.plainEnv" -}}
{{- range $name, $value := .env }}
{{- if has $name (list "DATABASE_URL" "LISTEN_DATABASE_URL" "OPENFGA_API_TOKEN") }}
{{- fail (printf "%s.%s: credentials come from the Secret (secret.*Key), never from values" $.where $name) }}
{{- end }}
{{- /* Helm reads every number in values as a float: 1000000 would print as 1e+06, which the services refuse. */}}
{{- if and (kindIs "float64" $value) (eq (float64 (int64 $value)) $value) }}{{ $value = int64 $value }}{{- end }}
- name: {{ $name }}
  value: {{ $value | toString | quote }}
{{- end }}
{{- end -}}

{{/* The pod-level settings every pod of the chart shares. */}}
{{- define "outbox.podCommon" -}}
automountServiceAccountToken: false
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* The outbox config's volume (the ConfigMap), mounted where the image's outbox command looks. */}}
{{- define "outbox.configVolume" -}}
- name: outbox-config
  configMap:
    name: {{ include "outbox.fullname" . }}-outbox-config
{{- end -}}
{{- define "outbox.configMount" -}}
- name: outbox-config
  mountPath: /etc/outbox
  readOnly: true
{{- end -}}
