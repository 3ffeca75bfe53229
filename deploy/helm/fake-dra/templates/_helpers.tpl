{{/*
Names are fixed, not derived from the release: a DRA driver is one per cluster (its CRDs,
classes and cluster roles are cluster-wide), and fixed names keep the objects equal to the
kustomize overlays of deploy/.
*/}}
{{- define "fake-dra.controller" -}}fake-dra-controller{{- end }}
{{- define "fake-dra.plugin" -}}fake-dra-kubelet-plugin{{- end }}

{{/* The mode, checked: classic or structured. */}}
{{- define "fake-dra.mode" -}}
{{- if not (has .Values.mode (list "classic" "structured")) -}}
{{- fail (printf "mode must be classic (Kubernetes 1.27-1.30) or structured (1.32+), not %q" .Values.mode) -}}
{{- end -}}
{{- .Values.mode -}}
{{- end }}

{{/* The image of both workloads. */}}
{{- define "fake-dra.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag }}
{{- end }}

{{/* The plugin's socket and checkpoint directory on the node. */}}
{{- define "fake-dra.pluginDir" -}}
{{ .Values.kubeletPlugin.kubeletDir }}/plugins/{{ .Values.driverName }}
{{- end }}

{{/* The ServiceAccount user name of the kubelet plugin, for the admission policies. */}}
{{- define "fake-dra.pluginUser" -}}
system:serviceaccount:{{ .Release.Namespace }}:{{ include "fake-dra.plugin" . }}
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
