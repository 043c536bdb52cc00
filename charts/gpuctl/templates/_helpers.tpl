{{/*
Names and labels, in Kueue's chart conventions (kueue.name, kueue.chart, kueue.labels).
Object names are fixed (gpuctl-admission, gpuctl-serve, gpuctl, gpuctl-api): the platform is one per
cluster (cluster-scoped webhook, ClusterRoles, the Cohort `gpuctl`), and the alerts, the webhook's
namespaceSelector and the certificates name them.
*/}}
{{- define "gpuctl.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "gpuctl.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels Helm adds to every object, next to the manifest's own (app.kubernetes.io/name, and
app.kubernetes.io/managed-by: gpuctl, which gpuctl reads as "created by gpuctl", so it is kept). */}}
{{- define "gpuctl.labels" -}}
helm.sh/chart: {{ include "gpuctl.chart" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/part-of: {{ include "gpuctl.name" . }}
{{- if .Chart.AppVersion }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}
{{- end }}

{{/* The image, pinned by digest. */}}
{{- define "gpuctl.image" -}}
{{- $d := required "image.digest is required (sha256:...): the chart pins the image by digest; hack/image.sh prints it" .Values.image.digest -}}
{{- if not (regexMatch "^sha256:[0-9a-f]{64}$" $d) -}}
{{- fail (printf "image.digest %q is not a sha256 digest (sha256:<64 hex>); hack/image.sh prints the right one" $d) -}}
{{- end -}}
{{- if .Values.image.tag -}}
{{ .Values.image.repository }}:{{ .Values.image.tag }}@{{ $d }}
{{- else -}}
{{ .Values.image.repository }}@{{ $d }}
{{- end -}}
{{- end }}

{{/* "auto" | true | false -> "true" or "" (for `if`). Usage: include "gpuctl.auto" (list VALUE HAS) */}}
{{- define "gpuctl.auto" -}}
{{- $v := index . 0 -}}
{{- if eq (toString $v) "auto" -}}
{{- if index . 1 }}true{{ end -}}
{{- else if eq (toString $v) "true" -}}
true
{{- else if not (eq (toString $v) "false") -}}
{{- fail (printf "expected auto, true or false, got %q" (toString $v)) -}}
{{- end -}}
{{- end }}

{{/* MutatingAdmissionPolicy (admissionregistration.k8s.io/v1) is GA and on by default from 1.36. */}}
{{- define "gpuctl.topologyPolicy" -}}
{{- include "gpuctl.auto" (list .Values.topologyPolicy.enabled (semverCompare ">=1.36.0-0" .Capabilities.KubeVersion.Version)) -}}
{{- end }}

{{/* The earlier client's MutatingAdmissionPolicies (admission/policies/earlier_client.py): the same switch, its own value. */}}
{{- define "gpuctl.earlierClientPolicy" -}}
{{- include "gpuctl.auto" (list .Values.earlierClientPolicy.enabled (semverCompare ">=1.36.0-0" .Capabilities.KubeVersion.Version)) -}}
{{- end }}

{{- define "gpuctl.certManager" -}}
{{- include "gpuctl.auto" (list .Values.certManager.enabled (.Capabilities.APIVersions.Has "cert-manager.io/v1")) -}}
{{- end }}

{{/*
Where a serving certificate comes from (admission.yaml, api-tls.yaml): "existing" (a Secret you manage,
webhook.tls.existingSecret / apiTls.existingSecret), "cert-manager", or "helm" (a CA and certificate made by
Helm at install, kept on upgrade by lookup). Usage: include "gpuctl.tlsSource" (list $ EXISTING_SECRET)
*/}}
{{- define "gpuctl.tlsSource" -}}
{{- if index . 1 -}}existing
{{- else if include "gpuctl.certManager" (index . 0) -}}cert-manager
{{- else -}}helm
{{- end -}}
{{- end }}

{{/* The webhook's serving Secret: gpuctl-admission-tls, or the one you manage. */}}
{{- define "gpuctl.webhookSecret" -}}
{{- .Values.webhook.tls.existingSecret | default "gpuctl-admission-tls" -}}
{{- end }}

{{/* The REST API's serving Secret: gpuctl-api-tls, or the one you manage. */}}
{{- define "gpuctl.apiSecret" -}}
{{- .Values.apiTls.existingSecret | default "gpuctl-api-tls" -}}
{{- end }}

{{/*
cert-manager objects of a certificate file, adapted to certManager.issuerRef: without it, all of them (the
file's own self-signed root -> CA -> serving certificate); with it, only the serving Certificate, issued by
that issuer. Usage: include "gpuctl.certObjects" (dict "ctx" $ "file" F) | fromYaml -> {"items": [...]}
*/}}
{{- define "gpuctl.certObjects" -}}
{{- $ctx := .ctx -}}
{{- $ref := $ctx.Values.certManager.issuerRef | default (dict) -}}
{{- $items := list -}}
{{- range $o := (include "gpuctl.read" (dict "ctx" $ctx "file" .file) | fromYaml).items -}}
{{- if not $ref.name -}}
{{- $items = append $items $o -}}
{{- else if and (eq $o.kind "Certificate") (not $o.spec.isCA) -}}
{{- $_ := set $o.spec "issuerRef" (dict "name" $ref.name "kind" ($ref.kind | default "Issuer") "group" ($ref.group | default "cert-manager.io")) -}}
{{- $items = append $items $o -}}
{{- end -}}
{{- end -}}
{{- toYaml (dict "items" $items) -}}
{{- end }}

{{/* Kueue's controller as the API server names it (the identity every policy and the webhook skip). */}}
{{- define "gpuctl.kueueUser" -}}
system:serviceaccount:{{ .Values.kueue.namespace }}:{{ .Values.kueue.serviceAccountName }}
{{- end }}

{{/*
gpuctl.read: the objects of one file under files/ (symlinks to manifests/), as {"items": [...]}.
The text is rewritten before parsing in exactly these ways (README.md lists them):
  - the namespace gpuctl-system becomes the release namespace (namespaces, service references,
    DNS names, the webhook's own-namespace exclusion, RBAC subjects),
  - Kueue's controller system:serviceaccount:kueue-system:kueue-controller-manager becomes
    kueue.serviceAccountName in kueue.namespace, and every other kueue-system (the system namespaces the
    webhook and the policies never judge) kueue.namespace,
  - the placeholder image ghcr.io/runwhere/gpuctl:latest becomes the image pinned by digest,
  - "svc.cluster.local" follows kubernetesClusterDomain.
Usage: (include "gpuctl.read" (dict "ctx" $ "file" "files/serve/rbac.yaml") | fromYaml).items
*/}}
{{- define "gpuctl.read" -}}
{{- $ctx := .ctx -}}
{{- $raw := $ctx.Files.Get .file -}}
{{- if not $raw -}}
{{- fail (printf "chart file %s is missing or empty (it is a symlink into manifests/; see charts/gpuctl/README.md)" .file) -}}
{{- end -}}
{{- $text := $raw | replace "gpuctl-system" $ctx.Release.Namespace -}}
{{- $text = $text | replace "system:serviceaccount:kueue-system:kueue-controller-manager" (printf "system:serviceaccount:kueue-system:%s" $ctx.Values.kueue.serviceAccountName) | replace "kueue-system" $ctx.Values.kueue.namespace -}}
{{- $text = $text | replace "ghcr.io/runwhere/gpuctl:latest" (include "gpuctl.image" $ctx) | replace "svc.cluster.local" (printf "svc.%s" $ctx.Values.kubernetesClusterDomain) -}}
{{- $items := list -}}
{{- range $doc := regexSplit "(?m)^---[ \t]*$" $text -1 -}}
{{- $o := fromYaml $doc -}}
{{- if hasKey $o "Error" -}}
{{- fail (printf "%s: not valid YAML: %s" $.file $o.Error) -}}
{{- end -}}
{{- if hasKey $o "kind" -}}
{{- $items = append $items $o -}}
{{- end -}}
{{- end -}}
{{- toYaml (dict "items" $items) -}}
{{- end }}

{{/*
gpuctl.pod: apply the per-component values (dict "ctx" $ "obj" DEPLOYMENT "v" VALUES) to a Deployment
read from manifests/, in place. Empty values keep the manifest's setting.
*/}}
{{- define "gpuctl.pod" -}}
{{- $ctx := .ctx -}}
{{- $v := .v -}}
{{- $tpl := .obj.spec.template -}}
{{- $spec := $tpl.spec -}}
{{- if $v.replicas }}{{- $_ := set .obj.spec "replicas" (int $v.replicas) }}{{- end }}
{{- with $v.nodeSelector }}{{- $_ := set $spec "nodeSelector" . }}{{- end }}
{{- with $v.tolerations }}{{- $_ := set $spec "tolerations" . }}{{- end }}
{{- with $v.affinity }}{{- $_ := set $spec "affinity" . }}{{- end }}
{{- with $v.priorityClassName }}{{- $_ := set $spec "priorityClassName" . }}{{- end }}
{{- with $ctx.Values.imagePullSecrets }}{{- $_ := set $spec "imagePullSecrets" . }}{{- end }}
{{- $meta := $tpl.metadata -}}
{{- with $v.podAnnotations }}{{- $_ := set $meta "annotations" (merge (dict) . ($meta.annotations | default (dict))) }}{{- end }}
{{- $_ := set $meta "labels" (merge (dict) ($meta.labels | default (dict)) (dict "app.kubernetes.io/instance" $ctx.Release.Name)) -}}
{{- range $c := $spec.containers -}}
{{- $_ := set $c "imagePullPolicy" $ctx.Values.image.pullPolicy -}}
{{- with $v.resources }}{{- $_ := set $c "resources" . }}{{- end }}
{{- $env := list -}}
{{- range $e := ($c.env | default list) -}}
{{- if eq $e.name "GPUCTL_ALLOWED_HOST_PATHS" -}}
{{- $_ := set $e "value" (join ":" $ctx.Values.allowedHostPaths) -}}
{{- end -}}
{{- $env = append $env $e -}}
{{- end -}}
{{- if $env }}{{- $_ := set $c "env" $env }}{{- end }}
{{- end -}}
{{- end }}

{{/* gpuctl.emit: one object as a YAML document, with the chart's labels merged into its own. */}}
{{- define "gpuctl.emit" -}}
{{- $ctx := .ctx -}}
{{- $o := .obj -}}
{{- $labels := merge (dict) ($o.metadata.labels | default (dict)) (include "gpuctl.labels" $ctx | fromYaml) (.labels | default (dict)) -}}
{{- $_ := set $o.metadata "labels" $labels -}}
{{- with .annotations }}{{- $_ := set $o.metadata "annotations" (merge (dict) . ($o.metadata.annotations | default (dict))) }}{{- end }}
---
{{ toYaml $o }}
{{- end }}
