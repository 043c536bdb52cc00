{{/*
Helpers of the REST API's TLS, the backstop's flags and the NetworkPolicies (serve.yaml, api-tls.yaml,
networkpolicy.yaml, monitoring.yaml). Kept apart from _helpers.tpl, which the webhook's templates share.
*/}}

{{/* The REST API is installed at all: standalone (api.enabled) or inside serve (serve.api). "true" or "". */}}
{{- define "gpuctl.apiOn" -}}
{{- if or .Values.api.enabled (and .Values.serve.enabled .Values.serve.api) }}true{{ end -}}
{{- end }}

{{/* The REST API speaks HTTPS and needs Secret gpuctl-api-tls. */}}
{{- define "gpuctl.apiTls" -}}
{{- if and (include "gpuctl.apiOn" .) .Values.apiTls.enabled }}true{{ end -}}
{{- end }}

{{/* `gpuctl serve`'s port speaks HTTPS (its REST API is on, with TLS): probes, scrapes follow. */}}
{{- define "gpuctl.serveTls" -}}
{{- if and .Values.serve.enabled .Values.serve.api .Values.apiTls.enabled }}true{{ end -}}
{{- end }}

{{/* A value left empty means "gpuctl's default": "true" when set (0 is a value). */}}
{{- define "gpuctl.isSet" -}}
{{- if and (not (kindIs "invalid" .)) (ne (toString .) "") }}true{{ end -}}
{{- end }}
