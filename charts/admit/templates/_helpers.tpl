{{/*
Name of the chart, overridable with nameOverride.
*/}}
{{- define "admit.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
Full name of the release's objects: <release>-admit, or <release> when it already contains the chart name.
Also the name of the two (cluster-scoped) webhook configurations, so two releases never collide.
*/}}
{{- define "admit.fullname" -}}
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

{{- define "admit.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "admit.selectorLabels" -}}
app.kubernetes.io/name: {{ include "admit.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "admit.labels" -}}
helm.sh/chart: {{ include "admit.chart" . }}
{{ include "admit.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: admission-webhook
app.kubernetes.io/part-of: admit
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "admit.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "admit.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* Secret with the serving certificate (and, in self mode, the CA admit manages). */}}
{{- define "admit.secretName" -}}
{{- default (printf "%s-tls" (include "admit.fullname" .)) .Values.certificates.secretName -}}
{{- end -}}

{{- define "admit.leaseName" -}}
{{- default (printf "%s-controller" (include "admit.fullname" .)) .Values.controller.leaseName -}}
{{- end -}}

{{/* Namespace label of webhook.namespaceSelector. */}}
{{- define "admit.namespaceLabel" -}}
{{- default (printf "%s/webhook" .Values.config.annotationPrefix) .Values.webhook.namespaceSelector.label -}}
{{- end -}}

{{/* cert-manager: the serving Certificate, and the "<namespace>/<name>" its CA injector reads. */}}
{{- define "admit.certificateName" -}}
{{- printf "%s-serving" (include "admit.fullname" .) -}}
{{- end -}}

{{/*
The ports admit listens on (network.webhookPort, metrics.port, metrics.authProxy.port): the value, or the default
for the pod's network: 8443, 8080, 8444 in the pod's own network namespace; 10270, 10271, 10272 with
network.hostNetwork, where they share the node's ports (clear of the kubelet's 10248/10250/10255, kube-proxy's
10249/10256, kube-controller-manager's 10257, kube-scheduler's 10259, and 10260, cert-manager's documented webhook
port under hostNetwork).
*/}}
{{- define "admit.webhookPort" -}}
{{- int (default (ternary 10270 8443 .Values.network.hostNetwork) .Values.network.webhookPort) -}}
{{- end -}}

{{- define "admit.metricsPort" -}}
{{- int (default (ternary 10271 8080 .Values.network.hostNetwork) .Values.metrics.port) -}}
{{- end -}}

{{- define "admit.authProxyPort" -}}
{{- int (default (ternary 10272 8444 .Values.network.hostNetwork) .Values.metrics.authProxy.port) -}}
{{- end -}}

{{- define "admit.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/*
Checks across values that values.schema.json cannot express. Included by every template that depends on them,
so a bad combination fails `helm install` with a message instead of rendering a webhook that cannot work.
*/}}
{{- define "admit.validate" -}}
{{- if ge (float64 .Values.config.apiTimeoutSeconds) (float64 .Values.webhook.timeoutSeconds) -}}
{{- fail (printf "config.apiTimeoutSeconds (%v) must be lower than webhook.timeoutSeconds (%v): admit has to answer before the API server gives up on it" .Values.config.apiTimeoutSeconds .Values.webhook.timeoutSeconds) -}}
{{- end -}}
{{- if and (eq .Values.certificates.mode "certManager") .Values.certificates.certManager.issuerRef (not .Values.certificates.certManager.issuerRef.name) -}}
{{- fail "certificates.certManager.issuerRef needs a name (or leave it empty for the chart's own CA)" -}}
{{- end -}}
{{- if lt (float64 .Values.shutdown.drainSeconds) (float64 .Values.webhook.timeoutSeconds) -}}
{{- fail (printf "shutdown.drainSeconds (%v) must be at least webhook.timeoutSeconds (%v): a stopping replica must not cut a call the API server still waits for" .Values.shutdown.drainSeconds .Values.webhook.timeoutSeconds) -}}
{{- end -}}
{{- if and .Values.metrics.enabled .Values.metrics.serviceMonitor.enabled (eq .Values.metrics.access "loopback") -}}
{{- fail "metrics.serviceMonitor needs metrics.access authenticated (or plain): with loopback nothing outside the pod can scrape /metrics" -}}
{{- end -}}
{{- $webhookPort := int (include "admit.webhookPort" .) -}}
{{- $metricsPort := int (include "admit.metricsPort" .) -}}
{{- $proxyPort := int (include "admit.authProxyPort" .) -}}
{{- if and (eq .Values.metrics.access "authenticated") (eq $proxyPort $metricsPort) -}}
{{- fail "metrics.authProxy.port must differ from metrics.port: both listen in the same pod" -}}
{{- end -}}
{{- if and .Values.metrics.enabled (or (eq $metricsPort $webhookPort) (and (eq .Values.metrics.access "authenticated") (eq $proxyPort $webhookPort))) -}}
{{- fail (printf "network.webhookPort (%d) must differ from metrics.port and metrics.authProxy.port: they listen in the same pod" $webhookPort) -}}
{{- end -}}
{{- if .Values.network.hostNetwork -}}
{{- range $port := list $webhookPort $metricsPort $proxyPort -}}
{{- if and (ge $port 10248) (le $port 10259) -}}
{{- fail (printf "port %d is the node's with network.hostNetwork (10248-10259: the kubelet, kube-proxy, kube-controller-manager, kube-scheduler): pick another for network.webhookPort, metrics.port and metrics.authProxy.port, or leave them unset (10270-10272)" $port) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if and (not .Values.serviceAccount.create) (not .Values.serviceAccount.name) -}}
{{- fail "serviceAccount.name is required when serviceAccount.create is false" -}}
{{- end -}}
{{- end -}}

{{/*
namespaceSelector of every webhook: never kube-system nor the release namespace (admit's own pods must be able
to start while admit is down), nor the extra excluded namespaces; optIn mode selects only labelled namespaces,
optOut mode skips namespaces labelled <label>=disabled. kubernetes.io/metadata.name is set on every namespace
by the API server (Kubernetes >= 1.22).
*/}}
{{- define "admit.namespaceSelector" -}}
{{- $excluded := concat (list "kube-system" .Release.Namespace) .Values.webhook.namespaceSelector.excludeNamespaces | uniq -}}
{{- $label := include "admit.namespaceLabel" . -}}
namespaceSelector:
  matchExpressions:
    - key: kubernetes.io/metadata.name
      operator: NotIn
      values:
        {{- range $excluded }}
        - {{ . | quote }}
        {{- end }}
    {{- if eq .Values.webhook.namespaceSelector.mode "optIn" }}
    - key: {{ $label | quote }}
      operator: In
      values: ["enabled"]
    {{- else }}
    - key: {{ $label | quote }}
      operator: NotIn
      values: ["disabled"]
    {{- end }}
{{- end -}}

{{/*
CEL: the object (or, on UPDATE, its previous version) carries an annotation or label with admit's prefix.
*/}}
{{- define "admit.celHasPrefix" -}}
{{- $p := printf "%s/" .prefix -}}
{{- $o := .obj -}}
(has({{ $o }}.metadata.annotations) && {{ $o }}.metadata.annotations.exists(k, k.startsWith('{{ $p }}'))) || (has({{ $o }}.metadata.labels) && {{ $o }}.metadata.labels.exists(k, k.startsWith('{{ $p }}')))
{{- end -}}

{{/*
CEL: a CronJob's spec.jobTemplate.metadata.annotations (the CronJob controller copies them onto each Job) carry an
annotation with admit's prefix; every step is tested with has(), since any other kind has no spec.jobTemplate.
*/}}
{{- define "admit.celJobTemplateHasPrefix" -}}
{{- $p := printf "%s/" .prefix -}}
{{- $t := printf "%s.spec.jobTemplate" .obj -}}
(has({{ .obj }}.spec) && has({{ $t }}) && has({{ $t }}.metadata) && has({{ $t }}.metadata.annotations) && {{ $t }}.metadata.annotations.exists(k, k.startsWith('{{ $p }}')))
{{- end -}}

{{/*
CEL: the annotations a wrapper's template carries to each object its operator makes (admit writes them there, and
puts them on the object's own metadata at its CREATE): a ScheduledSparkApplication's SparkApplication's
spec.driver.annotations, a RayCronJob's RayJob's spec.rayClusterSpec.headGroupSpec.template.metadata.annotations.
Every step is tested with has(), since the other kinds have none of these fields.
*/}}
{{- define "admit.celCarriedHasPrefix" -}}
{{- $p := printf "%s/" .prefix -}}
{{- $s := printf "%s.spec" .obj -}}
{{- $h := printf "%s.rayClusterSpec.headGroupSpec" $s -}}
(has({{ .obj }}.spec) && has({{ $s }}.driver) && has({{ $s }}.driver.annotations) && {{ $s }}.driver.annotations.exists(k, k.startsWith('{{ $p }}'))) || (has({{ .obj }}.spec) && has({{ $s }}.rayClusterSpec) && has({{ $h }}) && has({{ $h }}.template) && has({{ $h }}.template.metadata) && has({{ $h }}.template.metadata.annotations) && {{ $h }}.template.metadata.annotations.exists(k, k.startsWith('{{ $p }}')))
{{- end -}}

{{/* matchConditions of the workload webhooks. */}}
{{- define "admit.workloadMatchConditions" -}}
{{- if .Values.webhook.matchConditions.enabled -}}
{{- $p := .Values.config.annotationPrefix -}}
matchConditions:
  - name: uses-admit
    expression: >-
      {{ include "admit.celHasPrefix" (dict "obj" "object" "prefix" $p) }} ||
      {{ include "admit.celJobTemplateHasPrefix" (dict "obj" "object" "prefix" $p) }} ||
      (request.operation == 'CREATE' && ({{ include "admit.celCarriedHasPrefix" (dict "obj" "object" "prefix" $p) }})) ||
      (request.operation == 'UPDATE' && ({{ include "admit.celHasPrefix" (dict "obj" "oldObject" "prefix" $p) }} ||
      {{ include "admit.celJobTemplateHasPrefix" (dict "obj" "oldObject" "prefix" $p) }}))
  # An object that is being deleted (a finalizer being removed) is never sent: admit allows it untouched anyway,
  # and a webhook that fails closed would otherwise hold the deletion, and its namespace, while admit is down.
  - name: not-being-deleted
    expression: "!has(object.metadata.deletionTimestamp)"
{{- end }}
{{- end -}}

{{/* matchConditions of the pod webhooks. */}}
{{- define "admit.podMatchConditions" -}}
{{- if .Values.webhook.matchConditions.enabled -}}
{{- $p := .Values.config.annotationPrefix -}}
matchConditions:
  - name: gang-pod
    expression: >-
      {{ include "admit.celHasPrefix" (dict "obj" "object" "prefix" $p) }}
      {{- with .Values.webhook.matchConditions.podLabelKeys }} ||
      (has(object.metadata.labels) && (
      {{- range $i, $k := . }}{{ if $i }} || {{ end }}'{{ $k }}' in object.metadata.labels{{ end -}}
      ))
      {{- end }}
{{- end }}
{{- end -}}

{{/* Rules for the workload kinds admit handles (CREATE and UPDATE). */}}
{{- define "admit.workloadRules" -}}
- apiGroups: ["apps"]
  apiVersions: ["v1"]
  resources: ["deployments", "statefulsets", "replicasets"]
  operations: ["CREATE", "UPDATE"]
  scope: Namespaced
- apiGroups: ["batch"]
  apiVersions: ["v1"]
  resources: ["jobs", "cronjobs"]
  operations: ["CREATE", "UPDATE"]
  scope: Namespaced
{{- if .Values.workloads.kubeflow }}
- apiGroups: ["kubeflow.org"]
  apiVersions: ["v1"]
  resources: ["tfjobs", "pytorchjobs", "mpijobs", "xgboostjobs", "paddlejobs", "jaxjobs"]
  operations: ["CREATE", "UPDATE"]
  scope: Namespaced
- apiGroups: ["kubeflow.org"]
  apiVersions: ["v2beta1"]
  resources: ["mpijobs"]
  operations: ["CREATE", "UPDATE"]
  scope: Namespaced
{{- end }}
{{- if .Values.workloads.spark }}
- apiGroups: ["sparkoperator.k8s.io"]
  apiVersions: ["v1beta2"]
  resources: ["sparkapplications"]
  operations: ["CREATE", "UPDATE"]
  scope: Namespaced
- apiGroups: ["sparkoperator.k8s.io"]
  apiVersions: ["v1alpha1"]
  resources: ["sparkconnects"]
  operations: ["CREATE", "UPDATE"]
  scope: Namespaced
- apiGroups: ["sparkoperator.k8s.io"]
  apiVersions: ["v1beta2"]
  resources: ["scheduledsparkapplications"]
  operations: ["CREATE", "UPDATE"]
  scope: Namespaced
{{- end }}
{{- if .Values.workloads.jobset }}
- apiGroups: ["jobset.x-k8s.io"]
  apiVersions: ["v1alpha2"]
  resources: ["jobsets"]
  operations: ["CREATE", "UPDATE"]
  scope: Namespaced
{{- end }}
{{- if .Values.workloads.leaderWorkerSet }}
- apiGroups: ["leaderworkerset.x-k8s.io"]
  apiVersions: ["v1"]
  resources: ["leaderworkersets"]
  operations: ["CREATE", "UPDATE"]
  scope: Namespaced
{{- end }}
{{- if .Values.workloads.ray }}
- apiGroups: ["ray.io"]
  apiVersions: ["v1"]
  resources: ["rayclusters", "rayjobs", "rayservices", "raycronjobs"]
  operations: ["CREATE", "UPDATE"]
  scope: Namespaced
{{- end }}
{{- if .Values.workloads.trainer }}
- apiGroups: ["trainer.kubeflow.org"]
  apiVersions: ["v1alpha1"]
  resources: ["trainjobs"]
  operations: ["CREATE", "UPDATE"]
  scope: Namespaced
{{- end }}
{{- end -}}

{{/* Fields every webhook of both configurations shares. */}}
{{- define "admit.webhookCommon" -}}
admissionReviewVersions: ["v1"]
sideEffects: NoneOnDryRun
matchPolicy: Equivalent
timeoutSeconds: {{ .Values.webhook.timeoutSeconds }}
{{ include "admit.namespaceSelector" . }}
{{- end -}}

{{/* clientConfig of a webhook; path is /mutate or /validate. caBundle: see the webhook configurations. */}}
{{- define "admit.clientConfig" -}}
clientConfig:
  service:
    name: {{ include "admit.fullname" .root }}
    namespace: {{ .root.Release.Namespace }}
    path: {{ .path }}
    port: {{ .root.Values.service.port }}
{{- end -}}

{{/* Annotations of the webhook configurations (cert-manager CA injection). */}}
{{- define "admit.webhookAnnotations" -}}
{{- if eq .Values.certificates.mode "certManager" -}}
annotations:
  cert-manager.io/inject-ca-from: {{ printf "%s/%s" .Release.Namespace (include "admit.certificateName" .) | quote }}
{{- end }}
{{- end -}}
