{{/*
The chart's name, for the app.kubernetes.io/name label.
*/}}
{{- define "gatekeeper.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The name of gatekeeper's objects: the release name, unless it lacks the
chart's name. `helm install gatekeeper` names them gatekeeper,
gatekeeper-policy and gatekeeper-redis, as the kustomize base does.
*/}}
{{- define "gatekeeper.fullname" -}}
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

{{- define "gatekeeper.redisName" -}}
{{- printf "%s-redis" (include "gatekeeper.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "gatekeeper.policyName" -}}
{{- printf "%s-policy" (include "gatekeeper.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "gatekeeper.commonLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: gatekeeper
{{- end }}

{{/*
Selector labels of gatekeeper's pods. Redis's pods have another name label,
so no gatekeeper selector (Deployment, Service, PodDisruptionBudget,
ServiceMonitor) picks them up.
*/}}
{{- define "gatekeeper.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gatekeeper.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "gatekeeper.labels" -}}
{{ include "gatekeeper.selectorLabels" . }}
{{ include "gatekeeper.commonLabels" . }}
{{- end }}

{{- define "gatekeeper.redisSelectorLabels" -}}
app.kubernetes.io/name: {{ include "gatekeeper.name" . }}-redis
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "gatekeeper.redisLabels" -}}
{{ include "gatekeeper.redisSelectorLabels" . }}
app.kubernetes.io/component: redis
{{ include "gatekeeper.commonLabels" . }}
{{- end }}

{{- define "gatekeeper.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/*
Where the policy's cluster.redis.url points: our own Redis's Service or
redis.url; "" without Redis.
*/}}
{{- define "gatekeeper.redisURL" -}}
{{- if .Values.redis.enabled }}
{{- printf "redis://%s:6379/0" (include "gatekeeper.redisName" .) }}
{{- else }}
{{- .Values.redis.url }}
{{- end }}
{{- end }}

{{/* Where the existing Redis's Secret is mounted. */}}
{{- define "gatekeeper.redisSecretDir" -}}
/etc/gatekeeper-redis
{{- end }}

{{/* Where the endpoint picker's TLS Secret is mounted: beside /etc/gatekeeper. */}}
{{- define "gatekeeper.pickerTLSDir" -}}
/etc/gatekeeper-tls
{{- end }}

{{/*
"true" when gatekeeper watches an InferencePool (endpoint picker with a
pool named): it then needs a ServiceAccount, its token and a Role.
*/}}
{{- define "gatekeeper.watchesPool" -}}
{{- if and .Values.endpointPicker.enabled .Values.endpointPicker.inferencePool.name }}true{{ end }}
{{- end }}

{{/*
Fails rendering on values that would deploy something wrong. Included by
every template that depends on them.
*/}}
{{- define "gatekeeper.validate" -}}
{{- $redis := .Values.redis }}
{{- if and $redis.enabled $redis.url }}
{{- fail "redis.enabled and redis.url are both set: deploy our own Redis (redis.enabled) or use an existing one (redis.url), not both" }}
{{- end }}
{{- if and $redis.existingSecret (not $redis.url) }}
{{- fail "redis.existingSecret is set without redis.url: the password Secret is for an existing Redis; our own (redis.enabled) has none" }}
{{- end }}
{{- if and (gt (int .Values.replicas) 1) (not (include "gatekeeper.redisURL" .)) }}
{{- fail (printf "replicas is %d but there is no Redis: replicas that share nothing would each let every vLLM pod run a whole max_inflight and each pass every rate limit. Set redis.enabled=true (or redis.url to an existing Redis), or replicas=1" (int .Values.replicas)) }}
{{- end }}
{{- $pdb := .Values.podDisruptionBudget }}
{{- if and $pdb.enabled (gt (int .Values.replicas) 1) (not (kindIs "string" $pdb.minAvailable)) (ge (int $pdb.minAvailable) (int .Values.replicas)) }}
{{- fail (printf "podDisruptionBudget.minAvailable is %d with %d replicas: a node drain could never evict one; set it below replicas" (int $pdb.minAvailable) (int .Values.replicas)) }}
{{- end }}
{{- $policy := .Values.policy | default dict }}
{{- $epp := .Values.endpointPicker }}
{{- if hasKey $policy "endpoint_picker" }}
{{- fail "policy.endpoint_picker is set by the chart from endpointPicker (enabled, port, healthPort, tls): remove it from policy and set endpointPicker instead" }}
{{- end }}
{{- if and $epp.enabled (or (eq (int $epp.healthPort) (int $epp.port)) (eq (int $epp.healthPort) (int .Values.ports.admin))) }}
{{- fail (printf "endpointPicker.healthPort is %d, the same as endpointPicker.port or ports.admin: the plaintext health listener needs a port of its own" (int $epp.healthPort)) }}
{{- end }}
{{- if and (not $epp.enabled) (or $epp.inferencePool.name $epp.tls.secretName) }}
{{- fail "endpointPicker.inferencePool.name or endpointPicker.tls.secretName is set but endpointPicker.enabled is false: set endpointPicker.enabled=true, or leave them empty" }}
{{- end }}
{{- if hasKey ($epp.upstream | default dict) "inference_pool" }}
{{- fail "endpointPicker.upstream.inference_pool is set by the chart from endpointPicker.inferencePool: remove it and set endpointPicker.inferencePool.name (and .namespace)" }}
{{- end }}
{{- range $key := list "listen" "admin_listen" }}
{{- if hasKey ($policy.server | default dict) $key }}
{{- fail (printf "policy.server.%s is set by the chart from ports.http and ports.admin (the container's ports): remove it from policy and set ports instead" $key) }}
{{- end }}
{{- end }}
{{- $as := .Values.autoscaling }}
{{- if and $as.keda.enabled $as.hpa.enabled }}
{{- fail "autoscaling.keda.enabled and autoscaling.hpa.enabled are both true: KEDA makes an HPA of its own, and two HPAs on one Deployment fight; turn on one" }}
{{- end }}
{{- if and (or $as.keda.enabled $as.hpa.enabled) (not (hasKey $policy "scaling")) }}
{{- fail "autoscaling is on but policy.scaling is not set: gatekeeper exports gatekeeper_desired_replicas only with a scaling section (e.g. policy.scaling: {pod_start_time: 4m})" }}
{{- end }}
{{- if and $as.hpa.enabled (or (gt (len $as.pool) 63) (not (regexMatch "^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$" $as.pool))) }}
{{- fail (printf "autoscaling.pool %q is not a Kubernetes label value (at most 63 letters, digits, '-', '_' or '.', a letter or digit at each end), which the HPA's metric selector needs: use autoscaling.keda, whose Prometheus query takes any model name (docs/scaling.md)" $as.pool) }}
{{- end }}
{{- if gt (int $as.minReplicas) (int $as.maxReplicas) }}
{{- fail (printf "autoscaling.minReplicas (%d) is above autoscaling.maxReplicas (%d)" (int $as.minReplicas) (int $as.maxReplicas)) }}
{{- end }}
{{- with $policy.cluster }}
{{- if not (include "gatekeeper.redisURL" $) }}
{{- fail "policy.cluster is set but there is no Redis: set redis.enabled=true or redis.url; the chart then adds cluster.redis.url and cluster.replicas" }}
{{- end }}
{{- if hasKey . "replicas" }}
{{- fail "policy.cluster.replicas is set by the chart from replicas: remove it from policy" }}
{{- end }}
{{- range $key := list "url" "password_file" }}
{{- if hasKey ($.Values.policy.cluster.redis | default dict) $key }}
{{- fail (printf "policy.cluster.redis.%s is set by the chart from redis.enabled, redis.url and redis.existingSecret: remove it from policy" $key) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The cluster section the chart adds to the policy: policy.cluster's own keys
plus redis.url, redis.password_file and replicas. An empty dict without
Redis.
*/}}
{{- define "gatekeeper.cluster" -}}
{{- $url := include "gatekeeper.redisURL" . }}
{{- if $url }}
{{- $cluster := deepCopy (.Values.policy.cluster | default dict) }}
{{- $r := deepCopy ($cluster.redis | default dict) }}
{{- $_ := set $r "url" $url }}
{{- if .Values.redis.existingSecret }}
{{- $_ := set $r "password_file" (printf "%s/%s" (include "gatekeeper.redisSecretDir" .) .Values.redis.existingSecretKey) }}
{{- end }}
{{- $_ := set $cluster "redis" $r }}
{{- $_ := set $cluster "replicas" (int .Values.replicas) }}
{{- toYaml $cluster }}
{{- else }}
{{- toYaml dict }}
{{- end }}
{{- end }}

{{/*
The policy as rendered into the ConfigMap: values' policy plus the listeners
from ports and, with Redis, the cluster section. As the endpoint picker:
endpoint_picker (listen on port, health_listen on healthPort) instead of
server.listen (no HTTP traffic listener), and
with a pool named, the upstreams as endpointPicker.upstream with
inference_pool.
*/}}
{{- define "gatekeeper.policy" -}}
{{- $policy := deepCopy (.Values.policy | default dict) }}
{{- $server := deepCopy ($policy.server | default dict) }}
{{- $epp := .Values.endpointPicker }}
{{- if not $epp.enabled }}
{{- $_ := set $server "listen" (printf ":%d" (int .Values.ports.http)) }}
{{- end }}
{{- $_ := set $server "admin_listen" (printf ":%d" (int .Values.ports.admin)) }}
{{- $_ := set $policy "server" $server }}
{{- if $epp.enabled }}
{{- $picker := dict "listen" (printf ":%d" (int $epp.port)) "health_listen" (printf ":%d" (int $epp.healthPort)) }}
{{- if $epp.tls.secretName }}
{{- $dir := include "gatekeeper.pickerTLSDir" . }}
{{- $_ := set $picker "tls" (dict "cert_file" (printf "%s/tls.crt" $dir) "key_file" (printf "%s/tls.key" $dir)) }}
{{- end }}
{{- $_ := set $policy "endpoint_picker" $picker }}
{{- if $epp.inferencePool.name }}
{{- $up := deepCopy ($epp.upstream | default dict) }}
{{- $_ := set $up "inference_pool" (dict "name" $epp.inferencePool.name "namespace" ($epp.inferencePool.namespace | default "")) }}
{{- $_ := set $policy "upstreams" (list $up) }}
{{- end }}
{{- end }}
{{- $cluster := include "gatekeeper.cluster" . | fromYaml }}
{{- if $cluster }}
{{- $_ := set $policy "cluster" $cluster }}
{{- end }}
{{- toYaml $policy }}
{{- end }}
