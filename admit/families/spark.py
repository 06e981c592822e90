"""Gang plans for Spark: SparkApplication (``sparkoperator.k8s.io/v1beta2``) and spark-submit's driver/executor pods.

A Spark gang has minMember 1. The driver creates the executors once it runs, so a PodGroup whose minMember counts
executors holds the driver in the Coscheduling Permit stage forever: a deadlock. The gang is sized by
``minResources`` instead (driver + initial executors), which the Coscheduling plugin checks against free capacity
before it lets the driver in (scheduler-plugins ``pkg/coscheduling/core/core.go``, ``CheckClusterResource``); the
spark-operator's own scheduler-plugins integration does the same (``internal/scheduler/kubescheduler``:
``MinMember: 1``, minResources = driver + executors).

SparkApplication rules and their sources:

- Label and scheduler go to ``spec.driver`` / ``spec.executor`` (``labels``, ``schedulerName``), which the
  spark-operator copies onto the pods.
- ``spec.batchScheduler`` set: the spark-operator gangs the application itself (Volcano, YuniKorn, or
  scheduler-plugins as ``kube-scheduler``); admit mutates nothing, creates nothing, and says so.
- The operator's ``--default-batch-scheduler`` (with ``--enable-batch-scheduler``; kubeflow/spark-operator
  ``internal/controller/sparkapplication/controller.go`` ``shouldDoBatchScheduling``: ``schedulerName :=
  r.options.DefaultBatchScheduler`` unless ``spec.batchScheduler`` is set) gangs every app the same way, without a
  trace on the SparkApplication (the plugin changes an in-memory copy; only ``status`` is written back). Its
  objects are named apart from admit's ``<app>`` (``<app>-pg`` from ``internal/scheduler/kubescheduler/util.go``
  ``getPodGroupName``, Volcano's ``spark-<app>-pg`` from ``internal/scheduler/volcano/util.go``), and the pods keep
  admit's label: ``spec.driver.labels`` are passed to spark-submit after the app's labels (``submission.go``
  ``driverConfOption``), and the later ``--conf`` wins (Spark's side **unconfirmed**). admit cannot read the flag:
  every app it gangs gets a note saying so (:func:`default_batch_scheduler_note`), and ``admit status`` shows
  the operator's unused object (``backends.coscheduling.diagnose``, reason ``SecondGang``).
- Executors at start: ``spec.executor.instances``, else ``sparkConf["spark.executor.instances"]``, else 1 (the
  spark-operator's defaulting, ``api/v1beta2/defaults.go`` ``setExecutorSpecDefaults``; spark-submit alone would
  use Spark's default of 2). With dynamic allocation (``spec.dynamicAllocation.enabled`` or
  ``spark.dynamicAllocation.enabled``) Spark starts ``max(instances, initialExecutors, minExecutors)``
  (``Utils.getDynamicAllocationInitialExecutors``; instances then has no default, initialExecutors defaults to
  minExecutors, minExecutors to 0).
- Pod memory (Spark ``BasicDriverFeatureStep`` / ``BasicExecutorFeatureStep``), in whole MiB:
  ``memory + overhead`` where memory = ``spec.<role>.memory`` (else ``spark.<role>.memory``, else ``1g``) and
  overhead = ``memoryOverhead`` when set, else ``max(floor(memory x factor), 384)`` (384 MiB:
  ``spark.<role>.minMemoryOverhead``); factor = ``spark.<role>.memoryOverheadFactor``, else
  ``spec.memoryOverheadFactor`` (passed as ``spark.kubernetes.memoryOverheadFactor``), else 0.1 for Java/Scala and
  0.4 for Python/R (``spec.type``, spark-operator ``DefaultJVMMemoryOverheadFactor`` /
  ``DefaultNonJVMMemoryOverheadFactor``). Executors add ``spark.executor.pyspark.memory`` (Python apps) and
  ``spark.memory.offHeap.size`` (when ``spark.memory.offHeap.enabled``).
- Spark memory strings are JVM byte strings, not Kubernetes quantities (``JavaUtils.byteStringAs``): a whole number
  with an optional suffix ``b k kb m mb g gb t tb p pb`` (binary: ``2g`` = 2 GiB), case-insensitive; a plain number
  is MiB for memory, overhead and pyspark memory (``bytesConf(ByteUnit.MiB)``), bytes for the off-heap size.
  Fractions (``1.5g``) and Kubernetes suffixes (``2Gi``) are refused, as Spark refuses them.
- CPU: ``coreRequest`` (``spark.kubernetes.<role>.request.cores``), else ``cores`` (``spark.<role>.cores``), else 1.
  GPUs: ``gpu.name`` x ``gpu.quantity``. Sidecars (``spec.<role>.sidecars``) and init containers count as in any
  pod (``resources.pod_requests``).
- Annotating a submitted application is refused with the fix (:func:`running_spark_application`); a re-apply
  that drops admit's marks gets them back as stored (no spec change, no re-run).

spark-submit without the operator (Spark "Running on Kubernetes"; Spark ``KubernetesConf``,
``ExecutorPodsAllocator``, ``KubernetesUtils.addOwnerReference``):

- The driver Pod carries ``spark-role: driver`` and ``spark-app-selector: spark-<32 hex>`` (the application id);
  annotated with ``gang.admit.dev/min-member`` (``--conf spark.kubernetes.driver.annotation.<key>=<value>``) it gets
  a PodGroup named after ``spark-app-selector`` (unless ``gang.admit.dev/pod-group`` names it), minMember 1,
  minResources = the driver's requests + ``gang.admit.dev/spark-executors`` x ``gang.admit.dev/spark-executor-
  resources``. The second is a comma-separated list of Kubernetes quantities, the executor pod's requests as
  Kubernetes sees them (Spark's memory + overhead): ``cpu=1,memory=4505Mi,nvidia.com/gpu=1``. The PodGroup's owner
  is the driver pod (``/Pod/<driver>``), which the PodGroup controller adopts it to, and the driver pod is labelled
  ``gang.admit.dev/managed: "true"`` like other gang workloads.
- Executor Pods (``spark-role: executor``, same ``spark-app-selector``) join their driver pod's group
  (:func:`join_spark_executor`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any, Callable, TypeVar

from ..config import POD_GROUP_BACKEND, Config
from ..echo import clip
from ..gang.ownerrefs import controller_ref
from ..gang.plan import (GangAnnotations, GangError, GangPlan, PodTarget, choose_group_name, get_map, get_path,
                         int_field)
from ..gang.quantity import QuantityError, add_resources, format_resources, parse_quantity, scale_resources
from .apps import POD, resolve_pod
from .argo import resolve_step_pod, step_pod
from .shared import AllowedBackends, RunningUpdate, RunningVerdict, WorkloadKind, object_ref, requests_of

__all__ = [
    "KINDS",
    "spark_bytes",
    "spark_pod_resources",
    "initial_executors",
    "resolve_spark_application",
    "resolve_spark_driver",
    "resolve_pod_or_spark_driver",
    "join_spark_executor",
    "DriverLookup",
    "executor_plan",
    "driver_group",
    "parse_resource_list",
    "default_batch_scheduler_note",
    "running_spark_application",
    "one_member",
]

SPARK_ROLE = "spark-role"
SPARK_APP_SELECTOR = "spark-app-selector"
MIB = 2**20
MIN_OVERHEAD_MIB = 384
JVM_FACTOR = Fraction(1, 10)
NON_JVM_FACTOR = Fraction(2, 5)

_BYTE_STRING_RE = re.compile(r"^([0-9]{1,19})([a-z]+)?$")  # ASCII digits; a JVM long has at most 19
MAX_BYTES = 2**63 - 1  # Spark reads sizes into a Java long (JavaUtils.byteStringAs)
_FACTOR_RE = re.compile(r"^(?:[0-9]{1,12}(?:\.[0-9]{0,12})?|\.[0-9]{1,12})(?:[eE][+-]?[0-9]{1,2})?$")
_COUNT_RE = re.compile(r"^[0-9]{1,10}$")
MAX_COUNT = 2**31 - 1  # executor counts are Java ints
_FRACTION_RE = re.compile(r"^[0-9]*\.[0-9]+([a-z]+)?$")
_SUFFIXES = {
    "b": 1, "k": 2**10, "kb": 2**10, "m": 2**20, "mb": 2**20, "g": 2**30, "gb": 2**30,
    "t": 2**40, "tb": 2**40, "p": 2**50, "pb": 2**50,
}

_T = TypeVar("_T")

DRIVER = PodTarget(("spec", "driver", "labels"), ("spec", "driver", "schedulerName"), where="driver")
EXECUTOR = PodTarget(("spec", "executor", "labels"), ("spec", "executor", "schedulerName"), where="executor")


def _field(what: str) -> str:
    """The field a parse error names (``"SparkApplication ns/pi: spec.driver.memory"`` -> ``"spec.driver.memory"``)."""
    return what.rpartition(": ")[2]


def _has(what: str, value: Any) -> str:
    """``what`` and its ``value`` said after the fix: ``"SparkApplication ns/pi: spec.driver.memory='2Gi'"`` or
    ``"sparkConf spark.driver.memory='2Gi'"``."""
    return f"{what}={clip(value)}"


def spark_bytes(value: Any, what: str, default_unit: int = MIB) -> int:
    """Bytes of a Spark/JVM memory string (module docstring): ``"512m"`` -> 536870912; ``default_unit`` is the unit
    of a number without suffix.

    Raises:
        GangError (400): not a whole number with a Spark suffix (``"12x"``, ``"1.5g"``, ``"2Gi"``); the message
            names ``what`` (the field) and the accepted form.
    """
    text = str(value).strip().lower() if isinstance(value, (str, int)) and not isinstance(value, bool) else None
    if text is not None and len(text) > 40:
        text = "?"  # longer than any size a Java long holds: refused below without parsing it
    m = _BYTE_STRING_RE.match(text) if text is not None else None
    if m is None or (m.group(2) is not None and m.group(2) not in _SUFFIXES):
        hint = ""
        if text is not None and _FRACTION_RE.match(text):
            hint = " (Spark takes no fractions: write 1536m, not 1.5g)"
        elif text is not None and text.endswith("i"):
            hint = " (that is a Kubernetes quantity; Spark writes 2g, not 2Gi)"
        raise GangError(
            f"Set {_field(what)} to a whole number with a suffix k, m, g or t (binary units: 512m, 2g): "
            f"{_has(what, value)} is not a Spark memory size{hint}",
            400,
        )
    size = int(m.group(1)) * (_SUFFIXES[m.group(2)] if m.group(2) else default_unit)
    if size > MAX_BYTES:
        raise GangError(f"Lower {_field(what)}: {_has(what, value)} is larger than Spark can hold (a Java long of "
                        "bytes, about 8 EiB)", 400)
    return size


def _mib(value: Any, what: str, default_unit: int = MIB) -> int:
    """Whole MiB of a Spark memory string, rounded down as Spark's ``byteStringAsMb`` does."""
    return spark_bytes(value, what, default_unit) // MIB


def _factor(value: Any, what: str) -> Fraction:
    """A memory overhead factor (Spark reads a double): a plain decimal, at most two exponent digits, so that no
    input makes the arithmetic expensive (``Fraction("1e9999999")`` builds a ten-million-digit number)."""
    text = str(value).strip() if isinstance(value, (str, int, float)) and not isinstance(value, bool) else ""
    if not _FACTOR_RE.match(text):
        raise GangError(f"Set {_field(what)} to a non-negative number such as 0.1: {_has(what, value)} is not one",
                        400)
    return Fraction(text)


def _quantity(value: Any, what: str) -> Fraction:
    try:
        q = parse_quantity(value if not isinstance(value, str) else value.strip())
    except QuantityError as e:
        raise GangError(f"Set {_field(what)} to a Kubernetes quantity: {what}: {e}", 400) from None
    if q < 0:
        raise GangError(f"Set {_field(what)} to a quantity of 0 or more: {_has(what, value)} is negative", 400)
    return q


def _setting(spec: dict[str, Any], name: str | None, conf: dict[str, Any], key: str, where: str,
             parse: Callable[[Any, str], _T]) -> _T | None:
    """``spec[name]`` (named ``<where>.<name>``; ``name`` ``None``: none), else ``sparkConf[key]``, parsed; ``None``
    when neither is set."""
    if name is not None and spec.get(name) is not None:
        return parse(spec[name], f"{where}.{name}")
    return parse(conf[key], f"sparkConf {key}") if conf.get(key) is not None else None


def spark_pod_resources(app: dict[str, Any], role: str, ref: str = "SparkApplication") -> dict[str, Fraction]:
    """Requests of the driver (``role="driver"``) or of one executor (``"executor"``) pod of a SparkApplication:
    ``{"cpu": cores, "memory": bytes, <gpu name>: count, ...}`` as Fractions (rules in the module docstring).

    Raises:
        GangError (400): a memory string, factor, core count or GPU spec that does not parse (the message names it).
    """
    spec = get_map(app, ("spec", role))
    conf = get_map(app, ("spec", "sparkConf"))
    where = f"{ref}: spec.{role}"
    cpu = _setting(spec, "coreRequest", conf, f"spark.kubernetes.{role}.request.cores", where, _quantity)
    if cpu is None:
        cpu = _setting(spec, "cores", conf, f"spark.{role}.cores", where, _quantity)
    memory = _setting(spec, "memory", conf, f"spark.{role}.memory", where, _mib)
    memory = 1024 if memory is None else memory
    overhead = _setting(spec, "memoryOverhead", conf, f"spark.{role}.memoryOverhead", where, _mib)
    if overhead is None:
        factor = _setting(spec, None, conf, f"spark.{role}.memoryOverheadFactor", where, _factor)
        if factor is None:  # the app's spec.memoryOverheadFactor, passed as spark.kubernetes.memoryOverheadFactor
            factor = _setting(get_map(app, ("spec",)), "memoryOverheadFactor", conf,
                              "spark.kubernetes.memoryOverheadFactor", f"{ref}: spec", _factor)
        if factor is None:
            jvm = str(get_path(app, ("spec", "type")) or "Scala") in ("Java", "Scala")
            factor = JVM_FACTOR if jvm else NON_JVM_FACTOR
        minimum = _setting(spec, None, conf, f"spark.{role}.minMemoryOverhead", where, _mib)
        overhead = max(math.floor(memory * factor), MIN_OVERHEAD_MIB if minimum is None else minimum)
    total_mib = memory + overhead
    if role == "executor":
        if str(get_path(app, ("spec", "type"))) == "Python" and conf.get("spark.executor.pyspark.memory") is not None:
            total_mib += _mib(conf["spark.executor.pyspark.memory"], "sparkConf spark.executor.pyspark.memory")
        off_heap = str(conf.get("spark.memory.offHeap.enabled", "")).strip().lower() == "true"
        if off_heap and conf.get("spark.memory.offHeap.size") is not None:
            total_mib += _mib(conf["spark.memory.offHeap.size"], "sparkConf spark.memory.offHeap.size", 1)
    resources = {"cpu": Fraction(1) if cpu is None else cpu, "memory": Fraction(total_mib * MIB)}
    gpu = spec.get("gpu")
    if gpu is not None:
        if not isinstance(gpu, dict) or not isinstance(gpu.get("name"), str) or not gpu.get("name"):
            raise GangError(f"Give {_field(where)}.gpu a resource name (gpu.name, e.g. nvidia.com/gpu) and a "
                            f"gpu.quantity: {_has(where + '.gpu', gpu)} has no name", 400)
        count = int_field(gpu, ("quantity",), 0, f"{where}.gpu.quantity")
        if count:
            resources[gpu["name"]] = resources.get(gpu["name"], Fraction(0)) + count
    for field in ("sidecars", "initContainers"):  # lists of containers in the spark-operator's SparkPodSpec
        if spec.get(field) is not None and not isinstance(spec[field], list):
            raise GangError(f"Make {_field(where)}.{field} a list of containers: "
                            f"{_has(f'{where}.{field}', spec[field])}", 400)
    sidecars = [c for c in spec.get("sidecars") or () if isinstance(c, dict)]
    inits = [c for c in spec.get("initContainers") or () if isinstance(c, dict)]
    if not sidecars and not inits:
        return resources
    main = {"name": f"spark-kubernetes-{role}", "resources": {"requests": format_resources(resources)}}
    return requests_of({"containers": [main, *sidecars], "initContainers": inits}, where)


def _count(obj: dict[str, Any], path: tuple[str, ...], what: str, conf: dict[str, Any], key: str) -> int | None:
    """The count at ``path`` of ``obj`` (named ``what``), else ``sparkConf[key]``; ``None`` when neither is set."""
    found = int_field(obj, path, None, what)
    value = conf.get(key)
    if found is not None or value is None:
        return found
    text = str(value).strip() if isinstance(value, (str, int)) and not isinstance(value, bool) else ""
    if not _COUNT_RE.match(text) or int(text) > MAX_COUNT:
        raise GangError(f"Set sparkConf {key} to a non-negative integer (at most {MAX_COUNT}): {clip(value)} is not "
                        "one", 400)
    return int(text)


def initial_executors(app: dict[str, Any], ref: str = "SparkApplication") -> tuple[int, str]:
    """``(executors Spark starts with, how that number was found)`` for a SparkApplication (module docstring).

    Raises:
        GangError (400): a count that is not a non-negative integer, or dynamic allocation whose bounds contradict
            (minExecutors or the initial number above maxExecutors, which Spark refuses at start).
    """
    conf = get_map(app, ("spec", "sparkConf"))
    instances = _count(app, ("spec", "executor", "instances"), f"{ref}: spec.executor.instances", conf,
                       "spark.executor.instances")
    dyn = get_path(app, ("spec", "dynamicAllocation"))
    if isinstance(dyn, dict):
        enabled = dyn.get("enabled") is True
    else:
        dyn = {}
        enabled = str(conf.get("spark.dynamicAllocation.enabled", "")).strip().lower() == "true"
    if not enabled:
        if instances is None:
            return 1, "spark-operator default of 1 executor"
        return instances, f"spec.executor.instances={instances}"
    min_e, init_e, max_e = (
        _count(dyn, (f,), f"{ref}: spec.dynamicAllocation.{f}", conf, f"spark.dynamicAllocation.{f}")
        for f in ("minExecutors", "initialExecutors", "maxExecutors"))
    min_v = min_e or 0
    init_v = init_e if init_e is not None else min_v  # initialExecutors defaults to minExecutors
    n = max(instances or 0, init_v, min_v)
    if max_e is not None and (min_v > max_e or n > max_e):
        raise GangError(
            f"Raise spec.dynamicAllocation.maxExecutors to at least {n}: {ref}: dynamic allocation starts {n} "
            f"executors (max of instances, initialExecutors, minExecutors) but maxExecutors is {max_e}, and Spark "
            "refuses to start",
            400,
        )
    return n, (f"dynamic allocation: max(instances={instances or 0}, initialExecutors={init_v}, "
               f"minExecutors={min_v})={n}")


def one_member(ann: GangAnnotations, config: Config, ref: str) -> int:
    if ann.min_member is not None and ann.min_member != 1:
        raise GangError(
            f'Set {config.min_member_key} to "auto" or "1": {ref}: {config.min_member_key}={ann.min_member} would '
            "deadlock, as the Spark driver creates the executors only once it runs, so a PodGroup waiting for "
            f"{ann.min_member} pods holds the driver back forever. A Spark gang has minMember 1 and minResources "
            "covering driver + executors"
        )
    return 1


def resolve_spark_application(
    obj: dict[str, Any], ann: GangAnnotations, config: Config, namespace: str, operation: str
) -> GangPlan:
    """Plan for a SparkApplication: minMember 1, minResources = driver + initial executors (module docstring).

    Raises:
        GangError: 400 without ``spec.driver``/``spec.executor`` (both required by the CRD) or with an unparsable size
            or count; 403 for a minMember other than 1.
    """
    name = str(get_path(obj, ("metadata", "name")) or "")
    ref = object_ref("SparkApplication", namespace, name)
    plan = GangPlan(
        kind="SparkApplication", api_group="sparkoperator.k8s.io", name=name, namespace=namespace, group_name=name,
        min_member=1, total_pods=None, total_field="", targets=[DRIVER, EXECUTOR],
    )
    scheduler = get_path(obj, ("spec", "batchScheduler"))
    if isinstance(scheduler, str) and scheduler:
        plan.mutate = False
        plan.create_pod_group = False
        plan.warnings.append(
            f"remove {config.min_member_key} or spec.batchScheduler: with spec.batchScheduler={str(scheduler)[:40]!r} "
            "the spark-operator gangs this app itself, so admit changes nothing and creates no PodGroup")
        return plan
    for role in ("driver", "executor"):
        if not isinstance(get_path(obj, ("spec", role)), dict):
            raise GangError(
                f"Add spec.{role} (cores, memory, instances): {ref} has none, and a SparkApplication needs spec.driver "
                "and spec.executor",
                400,
            )
    plan.min_member = one_member(ann, config, ref)
    plan.group_name = choose_group_name(obj, ann, plan.targets, config, "SparkApplication", name)
    executors, source = initial_executors(obj, ref)
    plan.total_pods = 1 + executors
    plan.total_field = f"1 driver + {source}"
    plan.schedule_timeout_seconds = ann.schedule_timeout_seconds
    driver = spark_pod_resources(obj, "driver", ref)
    executor = spark_pod_resources(obj, "executor", ref)
    if ann.min_resources:
        plan.min_resources = format_resources(add_resources(driver, scale_resources(executor, executors))) or None
    plan.operator_notice = default_batch_scheduler_note(ref, name, plan.group_name, config)
    plan.notes.append(plan.operator_notice)
    return plan


def default_batch_scheduler_note(ref: str, name: str, group: str, config: Config) -> str:
    """The note every SparkApplication admit gangs gets: ``--default-batch-scheduler`` (module docstring)."""
    return (f"{ref}: a spark-operator started with --enable-batch-scheduler and --default-batch-scheduler gangs every "
            f"SparkApplication too (PodGroup {name}-pg, Volcano's spark-{name}-pg or YuniKorn task groups) beside "
            f"admit's PodGroup {group}, and its object goes unused; run it without --default-batch-scheduler, or "
            f"leave the gang to it (set spec.batchScheduler and remove {config.min_member_key})")


def parse_resource_list(text: Any, what: str) -> dict[str, Fraction]:
    """``"cpu=1,memory=4505Mi,nvidia.com/gpu=1"`` -> ``{"cpu": 1, "memory": 4723834880, "nvidia.com/gpu": 1}``.

    Raises:
        GangError (400): an entry that is not ``name=quantity``, a repeated name, or a value that is not a
            non-negative Kubernetes quantity; the message names ``what`` and the expected form.
    """
    form = 'comma-separated name=quantity pairs, e.g. "cpu=1,memory=4505Mi"'
    if not isinstance(text, str) or not text.strip():
        raise GangError(f"Set {what} to {form}: it is empty", 400)
    out: dict[str, Fraction] = {}
    for item in text.split(","):
        key, sep, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key or not value:
            raise GangError(f"Set {what} to {form}: in {clip(text)}, {clip(item.strip())} is not name=quantity", 400)
        if key in out:
            raise GangError(f"Name {key[:253]} once in {what}: {clip(text)} names it twice", 400)
        try:
            q = parse_quantity(value)
        except QuantityError as e:
            raise GangError(f"Set {what} to {form}: in {clip(text)}, {clip(key)}: {e}", 400) from None
        if q < 0:
            raise GangError(f"Give {clip(key)} a quantity of 0 or more in {what}: {clip(text)} makes it negative", 400)
        if key in ("memory", "ephemeral-storage") and value.replace(".", "", 1).isdigit():
            raise GangError(
                f"Write {key}={value} in {what} as a Kubernetes quantity such as {value}Mi: in {clip(text)} it has no "
                "unit (Spark's MiB default does not apply to this annotation)",
                400,
            )
        out[key] = q
    return out


def resolve_spark_driver(
    pod: dict[str, Any], ann: GangAnnotations, config: Config, namespace: str, operation: str
) -> GangPlan:
    """Plan for a spark-submit driver Pod with the gang annotations (module docstring).

    Raises:
        GangError (400): a malformed ``spark-executors``/``spark-executor-resources`` annotation or pod quantity;
            (403) a minMember other than 1.
    """
    meta = get_map(pod, ("metadata",))
    name = str(meta.get("name") or "")
    ref = f"Spark driver Pod {namespace}/{name or meta.get('generateName', '')}"
    selector = str(meta["labels"][SPARK_APP_SELECTOR])
    min_member = one_member(ann, config, ref)
    group_name = choose_group_name(pod, ann, [POD], config, "Pod", selector)
    annotations = get_map(meta, ("annotations",))
    raw_n = annotations.get(config.spark_executors_key)
    executors = None
    if raw_n is not None:
        text = str(raw_n).strip() if isinstance(raw_n, str) else ""
        if not _COUNT_RE.match(text) or int(text) > MAX_COUNT:
            raise GangError(
                f"Set annotation {config.spark_executors_key} to the number of executors (spark.executor.instances), "
                f"a non-negative integer: {clip(raw_n)} is invalid",
                400,
            )
        executors = int(text)
    raw_r = annotations.get(config.spark_executor_resources_key)
    per_executor = (
        parse_resource_list(raw_r, f"annotation {config.spark_executor_resources_key}") if raw_r is not None else None
    )
    plan = GangPlan(
        kind="Pod", api_group="", name=name, namespace=namespace, group_name=group_name, min_member=min_member,
        total_pods=None, total_field="", schedule_timeout_seconds=ann.schedule_timeout_seconds, targets=[POD],
    )
    if not ann.min_resources:
        return plan
    total = requests_of(pod.get("spec"), ref)
    if executors is not None and per_executor is not None:
        total = add_resources(total, scale_resources(per_executor, executors))
    elif executors is not None or per_executor is not None:
        missing = config.spark_executor_resources_key if per_executor is None else config.spark_executors_key
        plan.warnings.append(
            f"set both {config.spark_executors_key} and {config.spark_executor_resources_key}: without {missing}, "
            f"PodGroup {str(group_name)[:63]}'s minResources covers the driver only")
    plan.min_resources = format_resources(total) or None
    return plan


def resolve_pod_or_spark_driver(
    obj: dict[str, Any], ann: GangAnnotations, config: Config, namespace: str, operation: str
) -> GangPlan:
    """The ``("", "Pod")`` resolver: a Spark driver (``spark-role: driver`` and ``spark-app-selector`` labels) gets
    :func:`resolve_spark_driver`, an Argo Workflow's step pod ``argo.resolve_step_pod``, any other bare pod
    :func:`admit.families.apps.resolve_pod`."""
    labels = get_path(obj, ("metadata", "labels"))
    if isinstance(labels, dict) and labels.get(SPARK_ROLE) == "driver" and labels.get(SPARK_APP_SELECTOR):
        return resolve_spark_driver(obj, ann, config, namespace, operation)
    if step_pod(obj):  # an Argo Workflow's step pod: a shared group that follows its members
        return resolve_step_pod(obj, ann, config, namespace, operation)
    return resolve_pod(obj, ann, config, namespace, operation)


def _belongs_to(pg: dict[str, Any], driver: str, config: Config) -> bool:
    owner = get_map(pg, ("metadata", "annotations")).get(f"{config.annotation_prefix.rstrip('/')}/owner")
    if owner == f"/Pod/{driver}":
        return True
    ref = controller_ref(pg)
    return ref is not None and ref.get("kind") == "Pod" and ref.get("name") == driver


@dataclass(frozen=True, slots=True)
class DriverLookup:
    """A Spark executor whose driver's group the cache cannot tell (``shared.PodRead``): ``admission.Admission``
    reads the driver pod, and the executor joins the driver's group (:func:`driver_group`, :func:`executor_plan`).

    Attributes:
        namespace / executor: the executor pod (``executor`` is its name, or generateName).
        name / uid: the driver pod to read, from the executor's controller ownerReference (``uid`` may be ``""``).
    """

    namespace: str
    executor: str
    name: str
    uid: str

    def group_of(self, pod: dict[str, Any], config: Config) -> str | None:
        return driver_group(pod, config)

    def plan(self, group: str) -> GangPlan:
        return executor_plan(self.namespace, self.executor, group)

    def unread(self, error: str) -> str:
        return (f"this Spark executor joins no PodGroup: admit could not read its driver pod {str(self.name)[:63]} "
                f"({str(error)[:80]})")

    def absent(self, why: str) -> str:
        return f"this Spark executor joins no PodGroup: its driver pod {str(self.name)[:63]} {why}"


def executor_plan(namespace: str, executor: str, group: str) -> GangPlan:
    """The plan that puts executor pod ``executor`` into PodGroup ``group`` (label and schedulerName only: the
    driver's group exists, minMember 1; executors never create or size it)."""
    return GangPlan(
        kind="Pod", api_group="", name=executor, namespace=namespace, group_name=group,
        min_member=1, total_pods=None, total_field="", targets=[POD], shared=True,
    )


def driver_group(driver_pod: dict[str, Any], config: Config) -> str | None:
    """The PodGroup a driver pod is in: its pod-group label (set by admit, by spark-submit's
    ``spark.kubernetes.driver.label.*``, or by hand), or ``None``."""
    labels = get_path(driver_pod, ("metadata", "labels"))
    group = labels.get(config.pod_group_label) if isinstance(labels, dict) else None
    return group if isinstance(group, str) and group else None


def join_spark_executor(pod: dict[str, Any], config: Config, namespace: str, known_groups: Any
                        ) -> GangPlan | DriverLookup | None:
    """POD_JOINERS entry: a Spark executor Pod joins the group its driver pod is in (label and schedulerName; a driver
    in no group leaves it alone); ``None`` for every other pod and for an executor without a driver (client mode: the
    driver runs outside the cluster). The driver is the executor's controller ownerReference (``kind: Pod``;
    spark-submit's ``KubernetesUtils.addOwnerReference``). Its group is found without an API call: the pod-group
    label of the driver pod in the controller's cache of gang drivers (``known_groups.workload("", "v1", "pods",
    "Pod", namespace, driver)``, when the cache has that method), else a PodGroup named after ``spark-app-selector``
    that belongs to the driver (``known_groups.get``: the PodGroup cache, or ``admit review``'s); otherwise a
    :class:`DriverLookup` asks for the driver to be read (a driver labelled by hand, or no controller)."""
    labels = get_path(pod, ("metadata", "labels"))
    if not isinstance(labels, dict) or labels.get(SPARK_ROLE) != "executor":
        return None
    ref = controller_ref(pod)
    if ref is None or ref.get("kind") != "Pod" or not isinstance(ref.get("name"), str) or not ref["name"]:
        return None
    driver = ref["name"]
    name = str(get_path(pod, ("metadata", "name")) or get_path(pod, ("metadata", "generateName")) or "")
    find = getattr(known_groups, "workload", None)
    if find is not None:
        _, driver_pod = find("", "v1", "pods", "Pod", namespace, driver)
        group = driver_group(driver_pod, config) if driver_pod is not None else None
        if group is not None:
            return executor_plan(namespace, name, group)
    selector = labels.get(SPARK_APP_SELECTOR)
    if known_groups is not None and selector:
        pg = known_groups.get(namespace, str(selector))
        if pg is not None:
            plan = executor_plan(namespace, name, str(selector))
            if not _belongs_to(pg, driver, config):
                plan.mutate = False
                plan.warnings.append(
                    f"this Spark executor joins no PodGroup: PodGroup {str(selector)[:63]} does not belong to its "
                    f"driver pod {str(driver)[:63]}")
            return plan
    return DriverLookup(namespace, name, driver, str(ref.get("uid") or ""))


def running_spark_application(update: RunningUpdate, plan: GangPlan, config: Config) -> RunningVerdict | None:
    """``WorkloadKind.running_update`` of a SparkApplication: refuse an UPDATE of a submitted application whose only
    spec change would be admit's marks (a ``kubectl annotate`` of a running or finished app).

    The spark-operator re-runs an application on any change of its spec (kubeflow/spark-operator v2.5.2
    ``internal/controller/sparkapplication/event_filter.go`` ``EventFilter.Update``: every spec change but
    ``suspend`` and ``timeToLiveSeconds`` sets the state to ``INVALIDATING``; ``controller.go``
    ``reconcileInvalidatingSparkApplication`` deletes the driver and executors and sets ``PENDING_RERUN``, whose
    reconcile submits it again). The ``PartialRestart`` gate (alpha, off by default) spares only executor fields
    (``isWebhookPatchedFieldsOnlyChange``), never the driver labels admit writes. An application not yet submitted
    (state ``""``, ``ApplicationStateNew``) and an UPDATE that changes the spec anyway (it re-runs, ganged) are let
    through. Removing the annotations (``update.removing``: admit would take its marks off the spec) is refused
    alike, leading with the fix.
    """
    state = get_path(update.old, ("status", "applicationState", "state"))
    if not state or not update.admit_alone_changes(("spec",)):
        return None
    if update.removing:  # admit's write takes its marks off the spec: the same re-run
        return RunningVerdict(
            "Remove the gang annotations in an update that changes the spec anyway, or delete and re-create the "
            f"SparkApplication without them: {plan.ref[:100]} was submitted (state {str(state)[:20]}), admit would take "
            "its label and schedulerName off spec.driver and spec.executor, and the spark-operator re-runs an "
            "application on any change of its spec (event_filter.go EventFilter.Update)", True)
    return RunningVerdict(
        f"Add the {config.annotation_prefix.rstrip('/')}/* annotations in an update that changes the spec anyway "
        "(that re-run is then ganged), or delete and re-create the SparkApplication with them: "
        f"{plan.ref} was submitted already (state {state}), and the spark-operator treats any change of its spec as "
        "a new application: it deletes the driver and the executors and runs the application again from the start "
        "(spark-operator event_filter.go EventFilter.Update: INVALIDATING, then PENDING_RERUN). admit gangs a "
        f"SparkApplication through its spec (the {config.pod_group_label} label and schedulerName in spec.driver and "
        "spec.executor), so these annotations alone would re-run it; admit writes nothing", True)


SPARK_BACKENDS = AllowedBackends((POD_GROUP_BACKEND,), lambda obj: True, "Spark", "executors join their driver "
                                 "by label, and the spark-operator does not copy spec.schedulingGroup into the pods "
                                 "it makes")
"""Spark's gangs stay on the pod-group label's backend (``WorkloadKind.allowed_backends``; SparkConnect's too)."""
SPARK_APPLICATION = WorkloadKind(
    "sparkoperator.k8s.io", "SparkApplication", (("v1beta2", "sparkapplications"),), resolve_spark_application,
    pod_joiner=None, pod_watch_selector=None, rollout=None, gang_from_parent=None, handover=None, controller_gang=None, in_status=False,
    allowed_backends=SPARK_BACKENDS, running_update=running_spark_application)
BARE_POD = WorkloadKind(
    "", "Pod", (), resolve_pod_or_spark_driver,
    pod_joiner=join_spark_executor, rollout=None, gang_from_parent=None, handover=None, controller_gang=None, in_status=False,
    # the drivers own their executors' group (spark-submit / spark-operator label spark-role)
    pod_watch_selector=f"{SPARK_ROLE}=driver",
    allowed_backends=replace(SPARK_BACKENDS,
                             applies=lambda obj: get_path(obj, ("metadata", "labels", SPARK_ROLE)) is not None))
"""Bare Pods: spark-submit drivers by label, other bare pods as ``apps.resolve_pod``."""

KINDS = (BARE_POD, SPARK_APPLICATION)
