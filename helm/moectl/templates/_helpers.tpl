{{/* Names, labels and the derived facts (leader election, scale targets) every template shares. */}}

{{- define "moectl.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "moectl.fullname" -}}
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

{{- define "moectl.selectorLabels" -}}
app.kubernetes.io/name: {{ include "moectl.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "moectl.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "moectl.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "moectl.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "moectl.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "moectl.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "moectl.tokensSecret" -}}
{{- default (printf "%s-tokens" (include "moectl.fullname" .)) .Values.tokens.existingSecret -}}
{{- end -}}

{{- define "moectl.controllerUrl" -}}
{{- printf "http://%s.%s.svc:%d" (include "moectl.fullname" .) .Release.Namespace (int .Values.controller.service.port) -}}
{{- end -}}

{{/* "true" when the controller replicas elect a leader through a Lease. */}}
{{- define "moectl.leaderElection" -}}
{{- if or .Values.leaderElection.enabled (gt (int .Values.controller.replicas) 1) -}}true{{- end -}}
{{- end -}}

{{- define "moectl.leaseName" -}}
{{- default (printf "%s-leader" (include "moectl.fullname" .)) .Values.leaderElection.leaseName -}}
{{- end -}}

{{- define "moectl.vllmName" -}}
{{- printf "%s-vllm-%s" (include "moectl.fullname" .) .Values.vllm.role | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "moectl.poolName" -}}
{{- printf "%s-%s" (include "moectl.fullname" .root) .role | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
The pools the controller sizes, as a JSON list of {deployment, role, namespace, apiVersion, kind, resource,
name}: this chart's managed pools (the bundled runtime's, the vLLM pool), then .Values.scaleTargets. The RBAC Roles and MOECTL_KUBE_SCALE_TARGETS
are both made from it, so the controller is granted exactly the objects it is told to scale.
*/}}
{{- define "moectl.scaleTargets" -}}
{{- $targets := list -}}
{{- range $role := list "prefill" "decode" -}}
{{- $pool := index $.Values.pools $role -}}
{{- if and $pool.enabled $pool.managed -}}
{{- $targets = append $targets (dict "deployment" $.Values.pools.deployment "role" $role "namespace" $.Release.Namespace "apiVersion" "apps/v1" "kind" $pool.kind "resource" (printf "%ss" (lower $pool.kind)) "name" (include "moectl.poolName" (dict "root" $ "role" $role))) -}}
{{- end -}}
{{- end -}}
{{- if and .Values.vllm.enabled .Values.vllm.managed -}}
{{- $targets = append $targets (dict "deployment" .Values.vllm.deployment "role" .Values.vllm.role "namespace" .Release.Namespace "apiVersion" "apps/v1" "kind" "Deployment" "resource" "deployments" "name" (include "moectl.vllmName" .)) -}}
{{- end -}}
{{- /* the kinds of controlplane/kube_kinds.py: apiVersion and plural known */ -}}
{{- $known := dict "Deployment" (list "apps/v1" "deployments") "StatefulSet" (list "apps/v1" "statefulsets") "LeaderWorkerSet" (list "leaderworkerset.x-k8s.io/v1" "leaderworkersets") "PodCliqueScalingGroup" (list "grove.io/v1alpha1" "podcliquescalinggroups") "DynamoGraphDeploymentScalingAdapter" (list "nvidia.com/v1beta1" "dynamographdeploymentscalingadapters") "RoleBasedGroupScalingAdapter" (list "workloads.x-k8s.io/v1alpha2" "rolebasedgroupscalingadapters") -}}
{{- range $target := .Values.scaleTargets -}}
{{- $defaults := get $known $target.kind | default (list "" "") -}}
{{- $targets = append $targets (dict "deployment" $target.deployment "role" $target.role "namespace" ($target.namespace | default $.Release.Namespace) "apiVersion" ($target.apiVersion | default (index $defaults 0)) "kind" $target.kind "resource" ($target.resource | default (index $defaults 1)) "name" $target.name "podsPerReplica" ($target.podsPerReplica | default 1)) -}}
{{- end -}}
{{- toJson $targets -}}
{{- end -}}

{{/* Checks no schema can express; `fail` stops install, upgrade, lint and template with the message. */}}
{{- define "moectl.validate" -}}
{{- if and (include "moectl.leaderElection" .) (ne .Values.database.type "postgresql") -}}
{{- fail (printf "controller.replicas=%d (or leaderElection.enabled) runs leader election, which needs one database shared by every replica: set database.type=postgresql and database.postgresql.existingSecret (SQLite on a ReadWriteOnce volume serves one replica)" (int .Values.controller.replicas)) -}}
{{- end -}}
{{- if and (eq .Values.database.type "postgresql") (not .Values.database.postgresql.existingSecret) -}}
{{- fail "database.type=postgresql needs database.postgresql.existingSecret: the name of a Secret whose key database.postgresql.key (default database-url) holds the SQLAlchemy URL, e.g. postgresql+psycopg://user:password@host:5432/moectl" -}}
{{- end -}}
{{- if and .Values.vllm.enabled (not .Values.vllm.model.claim) -}}
{{- fail "vllm.enabled needs vllm.model.claim: the PersistentVolumeClaim holding the checkpoint (vllm.model.path inside it, with its config.json), mounted read-only into vLLM and the sidecar" -}}
{{- end -}}
{{- $seen := dict -}}
{{- range $target := include "moectl.scaleTargets" . | fromJsonArray -}}
{{- $pool := printf "%s/%s" $target.deployment $target.role -}}
{{- if hasKey $seen $pool -}}
{{- fail (printf "scaleTargets: pool %s has two scale targets (%s and %s); each pool has one" $pool (get $seen $pool) $target.name) -}}
{{- end -}}
{{- $_ := set $seen $pool $target.name -}}
{{- end -}}
{{- end -}}

{{/* The pod-level settings every pod shares: the ServiceAccount token, service links and security. */}}
{{- define "moectl.podCommon" -}}
# MOECTL_* variables that service links would inject for a Service named moectl (MOECTL_PORT=tcp://...)
# collide with the controller's own settings
enableServiceLinks: false
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- end -}}

{{/* "true" when the controller talks to the Kubernetes API (a Lease, or pools to size): only then is the
ServiceAccount token mounted and a Role granted. */}}
{{- define "moectl.usesKubeApi" -}}
{{- if or (include "moectl.leaderElection" .) (include "moectl.scaleTargets" . | fromJsonArray) -}}true{{- end -}}
{{- end -}}
