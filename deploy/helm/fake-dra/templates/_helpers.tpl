{{/*
Names. With the defaults (release fake-dra, no overrides) they are the names of the
kustomize overlays of deploy/ (fake-dra-controller, fake-dra-kubelet-plugin,
fake-dra-fleet), which e2e/tests/it/deploy.rs and hack/ci-deploy-checks.sh compare with.
fullname follows the usual chart rule: the release name when it contains the chart's name,
else <release>-<name>; fullnameOverride replaces it, nameOverride the chart's name.
*/}}
{{- define "fake-dra.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "fake-dra.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "fake-dra.controller" -}}{{ include "fake-dra.fullname" . | trunc 52 | trimSuffix "-" }}-controller{{- end }}
{{- define "fake-dra.plugin" -}}{{ include "fake-dra.fullname" . | trunc 48 | trimSuffix "-" }}-kubelet-plugin{{- end }}
{{- define "fake-dra.fleet" -}}{{ include "fake-dra.fullname" . | trunc 57 | trimSuffix "-" }}-fleet{{- end }}

{{/* The chart label: name-version. */}}
{{- define "fake-dra.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The labels every object of the release carries (Helm's conventions). */}}
{{- define "fake-dra.labels" -}}
helm.sh/chart: {{ include "fake-dra.chart" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* The selector of a workload's pods: its name (as in deploy/) and the release. Call with (list $ "<name>"). */}}
{{- define "fake-dra.selectorLabels" -}}
{{- $ := index . 0 -}}
app.kubernetes.io/name: {{ index . 1 }}
app.kubernetes.io/instance: {{ $.Release.Name }}
{{- end }}

{{/* metadata.labels of an object without a workload name. */}}
{{- define "fake-dra.metadataLabels" -}}
labels:
  {{- include "fake-dra.labels" . | nindent 2 }}
{{- end }}

{{/* The ServiceAccount of a component: (list $ "<component default name>" "<values key>"). */}}
{{- define "fake-dra.serviceAccountName" -}}
{{- $ := index . 0 -}}
{{- $override := index $.Values.serviceAccount.names (index . 2) | default "" -}}
{{- default (index . 1) $override -}}
{{- end }}

{{/* The mode, checked: classic or structured. */}}
{{- define "fake-dra.mode" -}}
{{- if not (has .Values.mode (list "classic" "structured")) -}}
{{- fail (printf "mode must be classic (Kubernetes 1.27-1.30) or structured (1.32+), not %q" .Values.mode) -}}
{{- end -}}
{{- if and .Values.fleet.enabled (eq .Values.mode "classic") -}}
{{- fail "fleet.enabled needs mode=structured: fleet mode publishes ResourceSlices (Kubernetes 1.32+)" -}}
{{- end -}}
{{- if and (has .Values.kubeletPlugin.profile (list "gpu" "nvidia")) (eq .Values.mode "classic") -}}
{{- fail (printf "kubeletPlugin.profile=%s needs mode=structured: the %s profile is structured DRA only (Kubernetes 1.32+)" .Values.kubeletPlugin.profile .Values.kubeletPlugin.profile) -}}
{{- end -}}
{{- if and .Values.kubeletPlugin.seamlessUpgrade (eq .Values.mode "classic") -}}
{{- fail "kubeletPlugin.seamlessUpgrade needs mode=structured: classic kubelets (1.27-1.30) know one plugin instance per driver, and two pods of the rollout would take each other's sockets" -}}
{{- end -}}
{{- .Values.mode -}}
{{- end }}

{{/* The image of every workload; the tag defaults to the chart's appVersion. */}}
{{- define "fake-dra.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* The plugin's socket and checkpoint directory on the node. */}}
{{- define "fake-dra.pluginDir" -}}
{{ .Values.kubeletPlugin.kubeletDir }}/plugins/{{ .Values.driverName }}
{{- end }}

{{/* The ServiceAccount user name of the kubelet plugin, for the admission policies. */}}
{{- define "fake-dra.pluginUser" -}}
system:serviceaccount:{{ .Release.Namespace }}:{{ include "fake-dra.serviceAccountName" (list . (include "fake-dra.plugin" .) "kubeletPlugin") }}
{{- end }}

{{/* The resource.k8s.io version of the DeviceClass (structured). */}}
{{- define "fake-dra.deviceClassApiVersion" -}}
{{- $v := .Values.deviceClassApiVersion -}}
{{- if not $v -}}
{{- $v = ternary "v1" "v1beta1" (.Capabilities.APIVersions.Has "resource.k8s.io/v1") -}}
{{- end -}}
{{- if not (has $v (list "v1" "v1beta1")) -}}
{{- fail (printf "deviceClassApiVersion must be v1, v1beta1 or empty, not %q" $v) -}}
{{- end -}}
resource.k8s.io/{{ $v }}
{{- end }}

{{/* Pod scheduling fields of a workload: nodeSelector, affinity, tolerations. */}}
{{- define "fake-dra.scheduling" -}}
{{- with .nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* The env every workload shares at its end: the log level and the user's extra env. (list $ <extraEnv>) */}}
{{- define "fake-dra.extraEnv" -}}
{{- $ := index . 0 -}}
{{- with $.Values.logLevel }}
- name: RUST_LOG
  value: {{ . | quote }}
{{- end }}
{{- range index . 1 }}
- name: {{ .name }}
  {{- if hasKey . "value" }}
  {{- /* Env values are strings: --set x.value=64 would make a number. */}}
  value: {{ .value | toString | quote }}
  {{- end }}
  {{- with .valueFrom }}
  valueFrom:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}
{{- end }}

{{/* The plugin's device flags (fake, gpu and nvidia profiles, inventory), rendered only when set. */}}
{{- define "fake-dra.deviceEnv" -}}
{{- $p := .Values.kubeletPlugin -}}
{{- if ne $p.profile "fake" }}
- name: FAKE_DRA_PROFILE
  value: {{ $p.profile }}
{{- end }}
{{- with $p.gpus }}
- name: FAKE_DRA_GPUS
  value: {{ . | quote }}
{{- end }}
{{- with $p.nvidiaGpus }}
- name: FAKE_DRA_NVIDIA_GPUS
  value: {{ . | quote }}
{{- end }}
{{- with $p.models }}
- name: FAKE_DRA_MODELS
  value: {{ join "," . | quote }}
{{- end }}
{{- if $p.inventory }}
- name: FAKE_DRA_INVENTORY
  value: /etc/fake-dra/inventory.yaml
{{- end }}
{{- end }}

{{/*
Refuses to install over a fake-dra that another release or `kubectl apply -k` installed:
helm would stop at the first object it does not own, naming only that object. Looks the
class up (lookup finds nothing under `helm template`).
*/}}
{{- define "fake-dra.checkNotInstalled" -}}
{{- $apiVersion := ternary "resource.k8s.io/v1alpha2" (include "fake-dra.deviceClassApiVersion" .) (eq .Values.mode "classic") -}}
{{- $kind := ternary "ResourceClass" "DeviceClass" (eq .Values.mode "classic") -}}
{{- $existing := lookup $apiVersion $kind "" .Values.className -}}
{{- if $existing -}}
{{- $annotations := $existing.metadata.annotations | default dict -}}
{{- $owner := index $annotations "meta.helm.sh/release-name" | default "" -}}
{{- $ownerNs := index $annotations "meta.helm.sh/release-namespace" | default "" -}}
{{- if not $owner -}}
{{- fail (printf "fake-dra is already installed: the %s %s exists and no Helm release owns it (installed with kubectl apply -k deploy/%s?). Remove that install first (kubectl delete -k deploy/%s), or install this one with another driverName and className (and crds.install=false: the CRDs are shared)" $kind .Values.className .Values.mode .Values.mode) -}}
{{- else if or (ne $owner .Release.Name) (ne $ownerNs .Release.Namespace) -}}
{{- fail (printf "fake-dra is already installed by Helm release %s in namespace %s (it owns the %s %s). Upgrade that release (helm upgrade %s -n %s), uninstall it, or install this one with another driverName and className (and crds.install=false: the CRDs are shared)" $owner $ownerNs $kind .Values.className $owner $ownerNs) -}}
{{- end -}}
{{- end -}}
{{- end }}
