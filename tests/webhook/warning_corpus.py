"""One input per warning admit can give, with the fix the warning must lead with.

Each case is the manifests (or AdmissionReviews) ``admit review`` runs through ``/mutate`` and ``/validate``, the
flags the server would run with, and the fix: the words a user needs to act, which must survive kube-apiserver's
truncation (``test_warnings_fit.py``). The warnings were found by reading every place admit builds one (``grep -rn
"warnings.append\\|warnings=\\[" admit/``: the families' resolvers, the backends' ``join_ops``/``leave_ops``/
``ownership``, ``webhook/admission.py``, ``webhook/validate.py``, ``gang/plan.py``, ``gang/foreign.py``,
``gang/resources.py``, ``families/marks.py``, ``cli/review.py``); a new warning gets a case here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

LONG = "a-name-as-long-as-kubernetes-allows-for-a-label-value-sixty-3"  # 61 characters: every name in a case


@dataclass(frozen=True)
class Case:
    """``docs``: YAML documents (one string); ``fix``: the words the warning leads with; ``flags``: ``admit
    review``'s decision flags (those ``admit serve`` takes); ``source``: the module that builds the warning."""

    name: str
    source: str
    docs: str
    fix: str
    flags: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)

    def documents(self) -> list[dict[str, Any]]:
        return [d for d in yaml.safe_load_all(self.docs.replace("NAME", LONG)) if d]


def _job(annotations: str, spec: str, kind: str = "Job", api: str = "batch/v1") -> str:
    return f"""
apiVersion: {api}
kind: {kind}
metadata:
  name: NAME
  namespace: NAME
  annotations:
{annotations}
spec:
{spec}
  template:
    spec:
      restartPolicy: Never
      containers: [{{name: w, image: busybox, resources: {{requests: {{cpu: "1"}}}}}}]
"""


def _deployment(annotations: str, template_meta: str = "{}", pod_spec: str = "", replicas: int = 3) -> str:
    return f"""
apiVersion: apps/v1
kind: Deployment
metadata:
  name: NAME
  namespace: NAME
  annotations:
{annotations}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: w}}}}
  template:
    metadata: {template_meta}
    spec:
{pod_spec}
      containers: [{{name: w, image: busybox, resources: {{requests: {{cpu: "1"}}}}}}]
"""


def _update(obj: str, old: str) -> str:
    """An UPDATE AdmissionReview of ``obj`` over ``old`` (one YAML document each)."""
    new, before = yaml.safe_load(obj.replace("NAME", LONG)), yaml.safe_load(old.replace("NAME", LONG))
    group, _, version = new["apiVersion"].rpartition("/")
    plural = new["kind"].lower() + "s"
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "0b7e1a8e-5a44-4a3c-9d7e-1f4f1f7f0a01", "kind": {"group": group, "version": version,
                                                             "kind": new["kind"]},
        "resource": {"group": group, "version": version, "resource": plural}, "name": LONG, "namespace": LONG,
        "operation": "UPDATE", "userInfo": {"username": "alice"}, "object": new, "oldObject": before}}
    return yaml.safe_dump(review)


MIN = '    gang.admit.dev/min-member: "{}"'
WLAPI = ("--gang-backend", "workload-api", "--workload-api-version", "v1alpha2")
GANGED_JOB = _job(MIN.format(4), "  parallelism: 4\n  completions: 4")
GANGED_JOB_LABELLED = GANGED_JOB.replace("  template:\n    spec:", "  template:\n    metadata: {labels: "
                                         "{scheduling.x-k8s.io/pod-group: NAME}}\n    spec:")
PLAIN_JOB_LABELLED = GANGED_JOB_LABELLED.replace(MIN.format(4), "    team: ml")
MANAGED = "  labels: {gang.admit.dev/managed: 'true'}\n  annotations:"
PARTIAL = '\n    kueue.x-k8s.io/job-min-parallelism: "2"'  # annotated on a stored Job: a warning (CREATE: refused)
STALE_JOB = PLAIN_JOB_LABELLED.replace("  annotations:", MANAGED)

SERVING_LWS = """
apiVersion: leaderworkerset.x-k8s.io/v1
kind: LeaderWorkerSet
metadata: {name: vllm, namespace: NAME, annotations: {team: ml}}
spec:
  replicas: 2147483647
  rolloutStrategy: {type: RollingUpdate, rollingUpdateConfiguration: {partition: 2147483646, maxUnavailable: 1}}
  leaderWorkerTemplate:
    size: 2
    workerTemplate: {spec: {containers: [{name: w, image: vllm, resources: {requests: {cpu: "1"}}}]}}
"""

CASES: list[Case] = [
    Case("job-last-wave-of-one", "families/apps.py", _job(MIN.format("auto"),
         "  parallelism: 4\n  completions: 5\n  completionMode: Indexed"),
         "set spec.completions to a multiple of 4"),
    Case("job-retried-index", "families/apps.py", _job(MIN.format("auto"),
         "  parallelism: 4\n  completions: 4\n  completionMode: Indexed\n  backoffLimitPerIndex: 1"),
         "set spec.backoffLimitPerIndex to 0"),
    Case("kueue-partial-admission", "families/apps.py",
         _update(GANGED_JOB_LABELLED.replace(MIN.format(4), MIN.format(4) + PARTIAL), GANGED_JOB_LABELLED),
         "set kueue.x-k8s.io/job-min-parallelism to at least 4"),
    Case("multikueue-manager-copy", "families/apps.py",
         _job(MIN.format(4), "  parallelism: 4\n  completions: 4\n  managedBy: kueue.x-k8s.io/multikueue"),
         "run admit on the MultiKueue worker clusters"),
    Case("bare-pod-auto", "families/apps.py", """
apiVersion: v1
kind: Pod
metadata: {name: NAME, namespace: NAME, annotations: {gang.admit.dev/min-member: auto}}
spec: {containers: [{name: w, image: busybox}]}
""", "set gang.admit.dev/min-member to the pods that must start together"),
    Case("bare-pod-no-group", "families/apps.py", """
apiVersion: v1
kind: Pod
metadata: {name: NAME, namespace: NAME, annotations: {gang.admit.dev/min-member: "3"}}
spec: {containers: [{name: w, image: busybox}]}
""", "give each of the 3 pods the same gang.admit.dev/pod-group"),
    Case("cronjob-shared-group", "families/apps.py", """
apiVersion: batch/v1
kind: CronJob
metadata: {name: nightly, namespace: NAME}
spec:
  schedule: "0 3 * * *"
  jobTemplate:
    metadata: {annotations: {gang.admit.dev/min-member: "2", gang.admit.dev/pod-group: NAME}}
    spec:
      parallelism: 2
      completions: 2
      template:
        spec:
          restartPolicy: Never
          containers: [{name: w, image: busybox}]
""", "remove gang.admit.dev/pod-group"),
    Case("cronjob-own-annotations", "gang/plan.py", """
apiVersion: batch/v1
kind: CronJob
metadata: {name: nightly, namespace: NAME, annotations: {gang.admit.dev/min-member: "2"}}
spec:
  schedule: "0 3 * * *"
  jobTemplate:
    spec:
      parallelism: 2
      template:
        spec:
          restartPolicy: Never
          containers: [{name: w, image: busybox}]
""", "move the gang.admit.dev/ annotations to spec.jobTemplate.metadata.annotations"),
    Case("job-template-immutable", "backends/coscheduling/__init__.py",
         _update(GANGED_JOB, GANGED_JOB.replace(MIN.format(4), "    team: ml")), "delete and recreate the Job"),
    Case("job-template-immutable-native", "backends/workload_api/__init__.py",
         _update(GANGED_JOB, GANGED_JOB.replace(MIN.format(4), "    team: ml")), "delete and recreate the Job",
         flags=WLAPI),
    Case("job-ungang-keeps-label", "backends/coscheduling/__init__.py",
         _update(PLAIN_JOB_LABELLED.replace("    team: ml", "    team: ml\n  labels: {gang.admit.dev/managed: 'true'}"),
                 GANGED_JOB_LABELLED),
         "recreate the Job without the scheduling.x-k8s.io/pod-group label"),
    Case("stale-marks-on-a-job", "families/marks.py",
         _update(STALE_JOB, STALE_JOB),
         "put gang.admit.dev/min-member back on this Job"),
    Case("stale-marks-removed", "families/marks.py",
         _update(_deployment("    team: ml", "{labels: {scheduling.x-k8s.io/pod-group: NAME}}").replace(
             "  annotations:", "  labels: {gang.admit.dev/managed: 'true'}\n  annotations:"),
             _deployment("    team: ml", "{labels: {scheduling.x-k8s.io/pod-group: NAME}}")),
         "put gang.admit.dev/min-member back to gang it again"),
    Case("kuberay-gangs-itself", "families/shared.py", """
apiVersion: ray.io/v1
kind: RayCluster
metadata:
  name: NAME
  namespace: NAME
  labels: {ray.io/gang-scheduling-enabled: "true"}
  annotations: {gang.admit.dev/min-member: "2"}
spec:
  headGroupSpec: {rayStartParams: {}, template: {spec: {containers: [{name: head, image: rayproject/ray}]}}}
  workerGroupSpecs:
  - {groupName: w, replicas: 1, minReplicas: 1, maxReplicas: 1, rayStartParams: {},
     template: {spec: {containers: [{name: w, image: rayproject/ray}]}}}
""", "remove gang.admit.dev/min-member to silence this"),
    Case("ray-scheduler-label", "families/ray.py", """
apiVersion: ray.io/v1
kind: RayCluster
metadata:
  name: NAME
  namespace: NAME
  labels: {ray.io/scheduler-name: volcano}
  annotations: {gang.admit.dev/min-member: "2"}
spec:
  headGroupSpec: {rayStartParams: {}, template: {spec: {containers: [{name: head, image: rayproject/ray}]}}}
  workerGroupSpecs:
  - {groupName: w, replicas: 1, minReplicas: 1, maxReplicas: 1, rayStartParams: {},
     template: {spec: {containers: [{name: w, image: rayproject/ray}]}}}
""", "remove label ray.io/scheduler-name=volcano"),
    Case("rayjob-pod-group", "families/ray.py", """
apiVersion: ray.io/v1
kind: RayJob
metadata: {name: NAME, namespace: NAME, annotations: {gang.admit.dev/min-member: "2", gang.admit.dev/pod-group: g}}
spec:
  entrypoint: python run.py
  rayClusterSpec:
    headGroupSpec: {rayStartParams: {}, template: {spec: {containers: [{name: head, image: rayproject/ray}]}}}
    workerGroupSpecs:
    - {groupName: w, replicas: 1, minReplicas: 1, maxReplicas: 1, rayStartParams: {},
       template: {spec: {containers: [{name: w, image: rayproject/ray}]}}}
""", "remove annotation gang.admit.dev/pod-group"),
    Case("jobset-recreate", "families/jobset.py", """
apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata: {name: NAME, namespace: NAME, annotations: {gang.admit.dev/min-member: "4"}}
spec:
  failurePolicy: {maxRestarts: 3}
  replicatedJobs:
  - name: workers
    replicas: 2
    template:
      spec:
        parallelism: 2
        completions: 2
        template: {spec: {restartPolicy: Never, containers: [{name: w, image: busybox}]}}
""", "set spec.failurePolicy.restartStrategy: BlockingRecreate"),
    Case("kubeflow-priority-classes", "families/kubeflow.py", """
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: NAME, namespace: NAME, annotations: {gang.admit.dev/min-member: "2"}}
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      template: {spec: {priorityClassName: high, containers: [{name: pytorch, image: p,
                 resources: {requests: {cpu: "1"}}}]}}
    Worker:
      replicas: 3
      template: {spec: {priorityClassName: low, containers: [{name: pytorch, image: p,
                 resources: {requests: {cpu: "2"}}}]}}
""", "set spec.runPolicy.schedulingPolicy.minResources to be exact"),
    Case("kubeflow-min-available-overridden", "families/kubeflow.py", """
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: NAME, namespace: NAME, annotations: {gang.admit.dev/min-member: "3"}}
spec:
  runPolicy: {schedulingPolicy: {minAvailable: 2}}
  pytorchReplicaSpecs:
    Master: {replicas: 1, template: {spec: {containers: [{name: pytorch, image: p}]}}}
    Worker: {replicas: 3, template: {spec: {containers: [{name: pytorch, image: p}]}}}
""", "remove spec.runPolicy.schedulingPolicy.minAvailable=2 or make it equal"),
    Case("kubeflow-operator-gangs", "families/kubeflow.py", """
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: NAME, namespace: NAME, annotations: {gang.admit.dev/min-member: "3"}}
spec:
  runPolicy: {schedulingPolicy: {minAvailable: 2}}
  pytorchReplicaSpecs:
    Master: {replicas: 1, template: {spec: {containers: [{name: pytorch, image: p}]}}}
    Worker: {replicas: 3, template: {spec: {containers: [{name: pytorch, image: p}]}}}
""", "set spec.runPolicy.schedulingPolicy.minAvailable instead of gang.admit.dev/min-member",
         flags=("--kubeflow-gang-by-operator",)),
    Case("spark-batch-scheduler", "families/spark.py", """
apiVersion: sparkoperator.k8s.io/v1beta2
kind: SparkApplication
metadata: {name: NAME, namespace: NAME, annotations: {gang.admit.dev/min-member: "1"}}
spec:
  type: Scala
  mode: cluster
  batchScheduler: volcano
  driver: {cores: 1, memory: 512m}
  executor: {cores: 1, instances: 2, memory: 512m}
""", "remove gang.admit.dev/min-member or spec.batchScheduler"),
    Case("trainjob-runtime-missing", "cli/review.py", """
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: NAME, namespace: NAME, annotations: {gang.admit.dev/min-member: "2"}}
spec: {runtimeRef: {name: NAME}}
""", "review ClusterTrainingRuntime"),  # admit review's words; the server's: tests/cli/test_review_new_user.py
    Case("hpa-workload-not-reviewed", "cli/review.py", """
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: NAME, namespace: NAME}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: NAME}
  minReplicas: 2
  maxReplicas: 6
""", "review Deployment"),
    Case("foreign-legacy-label", "gang/foreign.py",
         _deployment(MIN.format(3), "{labels: {pod-group.scheduling.sigs.k8s.io: NAME}}"),
         "create PodGroup"),
    Case("foreign-labels-disagree", "gang/foreign.py",
         _deployment(MIN.format(3), "{labels: {pod-group.scheduling.sigs.k8s.io: other, "
                                    "scheduling.x-k8s.io/pod-group: NAME}}"),
         "remove pod-group.scheduling.sigs.k8s.io or make it equal"),
    Case("annotation-typo", "gang/plan.py", _deployment(MIN.format(3) + '\n    gang.admit.dev/Pod-Group: "g"'),
         "rename annotation gang.admit.dev/Pod-Group to gang.admit.dev/pod-group"),
    Case("annotation-on-template", "gang/plan.py",
         _deployment("    team: ml", "{annotations: {gang.admit.dev/min-member: '3'}}"),
         "move the gang.admit.dev/ annotations to the Deployment's own metadata.annotations"),
    Case("setting-without-min-member", "gang/plan.py", _deployment('    gang.admit.dev/schedule-timeout-seconds: "60"'),
         "add gang.admit.dev/min-member, or remove gang.admit.dev/schedule-timeout-seconds"),
    Case("other-scheduler-kept", "backends/coscheduling/__init__.py",
         _deployment(MIN.format(3), pod_spec="      schedulerName: volcano"), "remove schedulerName 'volcano'"),
    Case("other-scheduler-kept-native", "backends/workload_api/__init__.py",
         _deployment(MIN.format(3), pod_spec="      schedulerName: volcano"), "remove schedulerName 'volcano'",
         flags=WLAPI),
    Case("native-no-schedule-timeout", "backends/workload_api/__init__.py",
         _deployment(MIN.format(3) + '\n    gang.admit.dev/schedule-timeout-seconds: "60"'),
         "remove gang.admit.dev/schedule-timeout-seconds", flags=WLAPI),
    Case("native-no-min-resources", "backends/workload_api/__init__.py",
         _deployment(MIN.format(3) + "\n    gang.admit.dev/min-resources: auto"),
         "remove gang.admit.dev/min-resources", flags=WLAPI),
    Case("dra-resource-claims", "gang/resources.py",
         _deployment(MIN.format(3), pod_spec="      resourceClaims: [{name: gpu, resourceClaimTemplateName: gpu}]"),
         "nothing to change"),
    Case("controlled-pod-annotated", "webhook/mutate.py", """
apiVersion: v1
kind: Pod
metadata:
  name: NAME
  namespace: NAME
  annotations: {gang.admit.dev/min-member: "3"}
  ownerReferences: [{apiVersion: apps/v1, kind: ReplicaSet, name: NAME, uid: 6f1c2d3e-0000-4000-8000-000000000001,
                     controller: true}]
spec: {containers: [{name: w, image: busybox}]}
""", "annotate the controller (Deployment, Job, ...) instead of its pod template"),
    Case("setting-written-as-label", "gang/plan.py", _deployment("    team: ml").replace(
        "  annotations:", "  labels: {gang.admit.dev/min-member: '3'}\n  annotations:"),
         "move gang.admit.dev/min-member from metadata.labels to metadata.annotations"),
    Case("template-names-a-native-gang", "backends/__init__.py", GANGED_JOB.replace(
        "      restartPolicy: Never", "      restartPolicy: Never\n      workloadRef: {name: NAME, podGroup: workers}"),
         "remove gang.admit.dev/min-member or the pod template's spec.workloadRef"),
    Case("trainjob-volcano-runtime", "families/trainer.py", """
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: NAME, namespace: NAME, annotations: {gang.admit.dev/min-member: "2"}}
spec: {runtimeRef: {name: NAME}}
---
apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata: {name: NAME}
spec:
  podGroupPolicy: {volcano: {}}
  template:
    spec:
      replicatedJobs:
      - name: node
        template:
          spec:
            template:
              spec:
                containers: [{name: node, image: pytorch/pytorch}]
""", "remove the gang.admit.dev/* annotations to silence this"),
    Case("unhandled-volcano-job", "cli/review.py", """
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: NAME, namespace: NAME, annotations: {gang.admit.dev/min-member: "2"}}
spec: {minAvailable: 2, tasks: [{replicas: 2, name: w, template: {spec: {containers: [{name: w, image: b}]}}}]}
""", "remove the gang.admit.dev/* annotations"),
    Case("lws-serving-annotated", "families/lws.py", _update(SERVING_LWS.replace("{team: ml}", "{team: ml, "
         'gang.admit.dev/min-member: auto}'), SERVING_LWS),
         "annotate a serving LWS only when rolling all its groups is acceptable"),
]
