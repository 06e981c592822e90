"""Command line (argparse): the parser of ``admit serve``, ``review``, ``status`` and ``certs``, and :func:`main`;
one module per command does the work (``serve``, ``review``, ``status``, ``dev``). What each does, its flags and its
exit codes: the commands' ``--help`` (docs/cli.md).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import re
import sys
from pathlib import Path
from typing import Any, Sequence

from ..eventloop import EVERY_ADDRESS
from .. import __version__
from ..config import (
    DEFAULT_ANNOTATION_PREFIX,
    WORKLOAD_API_VERSIONS,
    DEFAULT_SCHEDULER_NAME,
    LEGACY_POD_GROUP_API_GROUP,
    LEGACY_POD_GROUP_LABEL,
    POD_GROUP_LABEL,
    Config,
)

__all__ = ["main", "build_parser", "config_from_args"]


def _positive_float(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text} is not a positive number")
    return value


def _non_negative_float(text: str) -> float:
    value = float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} is a negative number")
    return value


def _backend_names() -> tuple[str, ...]:
    """``--gang-backend``'s and ``--extra-gang-backend``'s choices: ``registry.BACKENDS`` when the parser is built."""
    from ..backends.registry import BACKENDS

    return tuple(BACKENDS)


def _backend_help() -> str:
    """``--gang-backend``'s help of ``registry.BACKENDS``: ``coscheduling (<description>) or workload-api (...)``."""
    from ..backends.registry import BACKENDS

    named = [f"{b.name} ({b.description})" for b in BACKENDS.values()]
    return " or ".join(named) if len(named) < 3 else ", ".join(named[:-1]) + " or " + named[-1]


def _add_extra_backend_flag(p: argparse.ArgumentParser, what: str) -> None:
    """``--extra-gang-backend``, repeatable, one of :func:`_backend_names`; ``what``: the help's tail."""
    p.add_argument("--extra-gang-backend", action="append", choices=_backend_names(), default=[], metavar="BACKEND",
                   help=f"a backend workloads may also pick with <prefix>/backend (repeatable; {what})")


def _handover_kinds() -> tuple[str, ...]:
    """``--controller-gang``'s choices: those that can hand a gang to its controller (``WorkloadKind.handover``)."""
    from ..families import FAMILY_KINDS

    return tuple(k.kind for k in FAMILY_KINDS if k.handover is not None)


_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


def _namespace_name(text: str) -> str:
    """A namespace name: an RFC 1123 label (lower-case alphanumerics and ``-``, at most 63 characters), as
    kube-apiserver's ``ValidateNamespaceName`` requires."""
    if not _DNS_LABEL.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a namespace name (lower-case letters, digits and '-', at most 63 characters, starting and "
            "ending with a letter or digit)")
    return text


def _add_api_flags(p: argparse.ArgumentParser, default: str) -> None:
    """``--kubeconfig`` (``default``: what is read without it) and ``--api-server``."""
    p.add_argument("--kubeconfig", default=None, help=f"kubeconfig file (default: {default})")
    p.add_argument("--api-server", default=None,
                   help="plain-HTTP API server URL without credentials, e.g. from 'kubectl proxy' or a local fake, as "
                        "admit serve --dev's $ADMIT_FAKE_API (overrides --kubeconfig)")


def _add_decision_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--scheduler-name", default=DEFAULT_SCHEDULER_NAME,
                   help="scheduler profile that runs Coscheduling (default: %(default)s; "
                        "default-scheduler for a single-scheduler install)")
    p.add_argument("--annotation-prefix", default=DEFAULT_ANNOTATION_PREFIX,
                   help="prefix of the workload annotations (default: %(default)s)")
    p.add_argument("--pod-group-api", choices=("scheduling.x-k8s.io", "scheduling.sigs.k8s.io"),
                   default="scheduling.x-k8s.io",
                   help="PodGroup API group of the installed scheduler-plugins: scheduling.x-k8s.io (v0.25.7 and "
                        "later, label scheduling.x-k8s.io/pod-group) or scheduling.sigs.k8s.io (older releases, label "
                        "pod-group.scheduling.sigs.k8s.io) (default: %(default)s)")
    p.add_argument("--ignore-api-group", action="append", default=[], metavar="GROUP",
                   help="API group whose workloads admit neither handles nor watches, e.g. kubeflow.org or "
                        "sparkoperator.k8s.io when their webhook rules and RBAC are off (repeatable)")
    p.add_argument("--kubeflow-gang-by-operator", action="store_true",
                   help="the Kubeflow training-operator gangs its own jobs: only validate Kubeflow jobs")
    p.add_argument("--gang-backend", choices=_backend_names(), default=Config().gang_backend,
                   help=f"what the gang annotations become: {_backend_help()}; a workload may pick another with "
                        "<prefix>/backend if enabled (default: %(default)s)")
    p.add_argument("--controller-gang", action="append", choices=_handover_kinds(), default=[], metavar="KIND",
                   help="with the workload-api backend, hand a new gang of this kind to its own controller through "
                        "its spec.scheduling instead of admit's Workload and PodGroup: Job on clusters running "
                        "WorkloadWithJob (Kubernetes 1.37 alpha, 1.38) (repeatable)")


def build_parser() -> argparse.ArgumentParser:
    """The ``admit`` argument parser with its four subcommands."""
    parser = argparse.ArgumentParser(
        prog="admit", description="Gang scheduling for Kubernetes workloads: an admission webhook and controller that "
                                  "give them scheduler-plugins Coscheduling PodGroups or Kubernetes Workload API gangs "
                                  "(scheduling.k8s.io Workload and PodGroup)")
    parser.add_argument("--version", action="version", version=f"admit {__version__}")
    # not required=True: main() refuses a missing command after an unknown flag (``admit --bogus`` names --bogus)
    sub = parser.add_subparsers(dest="command")

    _add_serve_parser(sub)
    _add_review_parser(sub)
    _add_status_parser(sub)
    _add_certs_parser(sub)
    return parser


def _add_serve_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``admit serve``: where it listens, its certificates, the API server, the decisions, API failures."""
    serve = sub.add_parser(
        "serve", help="run the HTTPS admission webhook server",
        description="Serve POST /mutate and /validate (AdmissionReview admission.k8s.io/v1), GET /healthz and /readyz "
                    "over HTTPS, create PodGroups through the Kubernetes API, and run the leader-elected PodGroup "
                    "controller.",
    )
    serve.add_argument("--dev", action="store_true",
                       help="try admit without a cluster: development certificates next to --tls-cert-file (reused "
                            "when there), the in-repo fake Kubernetes API holding the examples' Deployments, its "
                            "writes through this server's webhooks as the chart registers them (deploy/admit.yaml), "
                            "its address and the webhook's in <cert dir>/dev.env (ADMIT_FAKE_API, ADMIT_URL), 127.0.0.1, "
                            "no --shutdown-delay (README, 'Try it without a cluster')")
    serve.add_argument("--host", default=EVERY_ADDRESS,
                       help="bind address: '' (the default) every address of both families, IPv4 and IPv6 (one "
                            "socket each, for IPv4-only, IPv6-only and dual-stack clusters); 0.0.0.0 pins IPv4, :: "
                            "IPv6, or one address (127.0.0.1 with --dev)")
    serve.add_argument("--port", type=int, default=8443, help="HTTPS port (default: %(default)s)")
    serve.add_argument("--cert-mode", choices=("files", "self"), default="files",
                       help="files: serve --tls-cert-file/--tls-key-file, reloaded on change (cert-manager); "
                            "self: admit keeps a CA in a Secret and injects the caBundle (default: %(default)s)")
    serve.add_argument("--tls-cert-file", default="certs/tls.crt", help="PEM certificate (default: %(default)s)")
    serve.add_argument("--tls-key-file", default="certs/tls.key", help="PEM private key (default: %(default)s)")
    serve.add_argument("--namespace", default=os.environ.get("POD_NAMESPACE", "default"),
                       help="admit's own namespace (default: $POD_NAMESPACE or 'default')")
    serve.add_argument("--service-name", default="admit", help="Service in front of the webhook (default: %(default)s)")
    serve.add_argument("--secret-name", default="admit-tls", help="Secret for --cert-mode self (default: %(default)s)")
    serve.add_argument("--cluster-domain", default="cluster.local",
                       help="cluster DNS domain for the <svc>.<ns>.svc.<domain> certificate name in self mode "
                            "(default: %(default)s)")
    serve.add_argument("--mutating-webhook-config", default="admit",
                       help="MutatingWebhookConfiguration name (default: %(default)s)")
    serve.add_argument("--validating-webhook-config", default="admit",
                       help="ValidatingWebhookConfiguration name (default: %(default)s)")
    _add_api_flags(serve, "in-cluster config, else $KUBECONFIG or ~/.kube/config")
    _add_decision_flags(serve)
    _add_extra_backend_flag(serve, "grant its RBAC")
    serve.add_argument("--failure-mode", choices=("deny", "allow"), default="deny",
                       help="answer when the Kubernetes API cannot be reached: deny with the reason, or allow with a "
                            "warning (default: %(default)s)")
    serve.add_argument("--api-timeout", type=_positive_float, default=3.0,
                       help="seconds for the Kubernetes API calls of one admission (default: %(default)s; keep it "
                            "below the webhook timeoutSeconds)")
    _add_serve_process_flags(serve)


def _add_serve_process_flags(serve: argparse.ArgumentParser) -> None:
    """``admit serve``'s logs, metrics, controller and connection limits, and its shutdown."""
    serve.add_argument("--log-level", choices=("debug", "info", "warning", "error"), default="info",
                       help="log level (default: %(default)s)")
    serve.add_argument("--log-format", choices=("text", "json"), default="text",
                       help="text lines, or one JSON object per line (keys time, level, logger, message; admission "
                            "records add uid, kind, operation, namespace, object, decision, duration_ms) "
                            "(default: %(default)s)")
    serve.add_argument("--metrics-port", type=int, default=0,
                       help="plain-HTTP port of GET /metrics (Prometheus), never the webhook's TLS port; 0: no metrics "
                            "endpoint (default: %(default)s; the Helm chart uses 8080)")
    serve.add_argument("--metrics-host", default=None,
                       help="bind address of the metrics port, as --host (default: --host's)")
    serve.add_argument("--controller", dest="controller", action="store_true", default=True,
                       help="run the leader-elected controller that adopts and keeps the gang objects of every enabled "
                            "backend (default)")
    serve.add_argument("--no-controller", dest="controller", action="store_false",
                       help="do not run the controller")
    serve.add_argument("--orphan-grace-period", type=_positive_float, default=60.0,
                       help="seconds before an unclaimed managed gang object (a PodGroup) is deleted "
                            "(default: %(default)s)")
    serve.add_argument("--resync-period", type=_positive_float, default=300.0,
                       help="seconds between full controller resyncs (default: %(default)s)")
    serve.add_argument("--lease-name", default="admit-controller", help="leader election Lease (default: %(default)s)")
    serve.add_argument("--max-connections", type=int, default=500,
                       help="connections held at once; over it the connection idle longest is closed "
                            "(default: %(default)s)")
    serve.add_argument("--read-timeout", type=_positive_float, default=5.0,
                       help="seconds for a request (TLS handshake, headers, body) to arrive after its first byte "
                            "(default: %(default)s, the chart's webhook timeoutSeconds; kube-apiserver sends a review at once, so "
                            "this bounds only slow or stalled clients)")
    serve.add_argument("--idle-timeout", type=_positive_float, default=120.0,
                       help="seconds an idle keep-alive connection is kept (default: %(default)s; longer than "
                            "kube-apiserver's 90 s, so it closes its idle connections first)")
    serve.add_argument("--drain-seconds", type=_positive_float, default=10.0,
                       help="after the shutdown delay, seconds the connections left get to finish their requests "
                            "and go (default: %(default)s; at least the webhook timeout; the chart's "
                            "terminationGracePeriodSeconds is shutdown delay + drain + 15)")
    serve.add_argument("--lease-namespace", default=None, help="Lease namespace (default: --namespace)")
    serve.add_argument("--shutdown-delay", type=_non_negative_float, default=5.0,
                       help="seconds to go on serving after SIGTERM with /readyz failing and every answer saying "
                            "Connection: close, so that endpoints stop routing to this replica before it closes "
                            "(default: %(default)s; a second signal ends the wait)")


def _add_review_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``admit review``: the webhook's decisions on files, offline."""
    review = sub.add_parser(
        "review", help="show the webhook's decisions on manifests or AdmissionReview files",
        description="Run the webhook's own decisions offline: one line per object (verdict, kind/name, PodGroup, "
                    "minMember; the reason of a refusal, or the warning, whole). -v adds every warning, the notes "
                    "(what admit explains without asking for a change: they never reach kubectl's Warning: line), "
                    "the JSONPatch, the PodGroups and the object after mutation; -o yaml/json gives everything. A "
                    "denied object shows no patch and no mutated object (-o json/yaml: patch [] and object null): "
                    "kube-apiserver applies no patch to a refused object and stores nothing, as kubectl apply "
                    "--dry-run=server prints only the refusal. Exit "
                    "0 when all are allowed or unchecked, 1 when any is denied (with --strict: or has a warning, "
                    "notes never count; or no object was found), 2 when an argument is wrong (an unknown flag: "
                    "usage and 'unrecognized arguments', as argparse says it), a path does not exist or a file "
                    "cannot be read (not YAML or JSON, a mapping key given twice, no permission: reported on stderr; "
                    "the other files are still reviewed). Paths that exist but hold no Kubernetes object to review (an empty "
                    "folder, file or standard input, only values files, Helm templates or empty Lists) are no "
                    "error: a note on stderr says so and the exit is 0, with --strict 1: a CI step that checks "
                    "nothing never passes. YAML that is not a Kubernetes object (values.yaml, Chart.yaml, kustomization.yaml, a JSON6902 "
                    "patch) is skipped and counted; so are a Helm chart's templates and the patches a "
                    "kustomization.yaml names: review rendered output piped in, kubectl kustomize DIR | admit review "
                    "-, or helm template RELEASE CHART | admit review -. An object whose admission reads another "
                    "object (a TrainJob its ClusterTrainingRuntime or TrainingRuntime; a Scale from kubectl scale, "
                    "or a HorizontalPodAutoscaler, the workload it scales) is checked against it when that object "
                    "is among the files reviewed in the same run; otherwise its verdict is UNCHECKED (unchecked in "
                    "-o json/yaml names the object; allowed stays the answer on the files given), with a warning "
                    "naming that object and a note with the kubectl get that pipes your cluster's copy in "
                    "(kubectl get clustertrainingruntimes NAME -o yaml | admit review - FILE).",
    )
    # "*", not "+": _parse refuses a missing path after an unknown flag (argparse checks required positionals first)
    review.add_argument("paths", nargs="*", metavar="FILE|DIR|-",
                        help="YAML/JSON files or directories; - reads standard input (kubectl get -o yaml | ...)")
    review.add_argument("-n", "--namespace", type=_namespace_name, default="default",
                        help="namespace of the manifests without metadata.namespace, as kubectl apply -n (default: "
                             "%(default)s); a manifest's own namespace and an AdmissionReview's request.namespace "
                             "are kept")
    review.add_argument("-R", "--recursive", action="store_true",
                        help="read directories recursively (never hidden folders such as .git or .venv, nor "
                             "virtualenvs and node_modules); without it, as kubectl apply -f DIR, a note on stderr "
                             "names the sub-folders not read (never a failure, not with --strict either)")
    review.add_argument("-o", "--output", choices=("text", "json", "yaml"), default="text",
                        help="text: one line per object (default); json/yaml: every detail of every object")
    review.add_argument("-v", "--verbose", action="store_true",
                        help="text output: warnings, JSONPatch, PodGroups and the object after mutation per object")
    review.add_argument("--no-objects", action="store_true",
                        help="with -v (only): leave out the mutated objects (the one-line view never shows them; -o "
                             "json/yaml always carry them)")
    review.add_argument("--strict", action="store_true",
                        help="exit 1 when any object gets a warning too (a misspelt annotation key, a gang "
                             "annotation admit ignores: on a kind it does not handle, or without min-member), or when "
                             "no object was found to review, as linters' --strict: for CI. Notes never fail it")
    review.add_argument("--accept-warning", action="append", default=[], metavar="REGEX",
                        help="a warning you have read and accept: --strict no longer fails on the warnings this "
                             "regular expression finds in '<Kind> <namespace>/<name>: <warning>' (repeatable; e.g. "
                             "'Deployment ml/trainer: .*minResources')")
    review.add_argument("--workload-api-version", choices=WORKLOAD_API_VERSIONS, default="v1alpha2",
                        help="scheduling.k8s.io version of the workload-api backend's objects: v1 (Kubernetes "
                             "1.38), v1beta1 or v1alpha3 (1.37), v1alpha2 (1.36) (default: %(default)s; admit serve "
                             "takes the first one served, in this order)")
    _add_decision_flags(review)
    _add_extra_backend_flag(review, "as admit serve: none by default, so a workload asking for another backend is "
                                    "refused, as a server with the default backends refuses it")
    review.add_argument("--values", metavar="FILE", default=None,
                        help="the chart's values file: its config.* and workloads.* keys become the flags above, as "
                             "the chart gives them to admit serve (flags given here add to them or override them)")


def _add_status_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``admit status``: every gang in a cluster, and why its pods wait."""
    status = sub.add_parser(
        "status", help="show every gang: pods scheduled and pending, and why they wait",
        description="One line per gang (PodGroup, pod-group label value, or workload with admit's annotations): "
                    "group, workload, minMember, pods total/scheduled/pending, PodGroup phase, how long the oldest "
                    "pending pod has waited, and the reason (the scheduler's last FailedScheduling message or "
                    "PodScheduled condition, or what admit finds wrong: missing PodGroup, wrong scheduler, label "
                    "or annotation typo, minResources larger than the cluster).",
    )
    status.add_argument("-n", "--namespace", default=None,
                        help="namespace (default: the kubeconfig context's namespace, else 'default')")
    status.add_argument("-A", "--all-namespaces", action="store_true", help="every namespace")
    status.add_argument("-o", "--output", choices=("text", "json"), default="text",
                        help="text: one line per gang (default); json: an array, one object per gang (namespace, "
                             "group, workload, minMember, pods {total, scheduled, pending}, phase, waitingSeconds, "
                             "reason, message, retry), for scripts")
    status.add_argument("-w", "--watch", action="store_true", help="print again whenever something changes")
    status.add_argument("--interval", type=_positive_float, default=2.0,
                        help="seconds between reads with --watch (default: %(default)s)")
    _add_api_flags(status, "$KUBECONFIG or ~/.kube/config; in a pod, its service account")
    status.add_argument("--request-timeout", type=_positive_float, default=10.0,
                        help="seconds per API request (default: %(default)s)")
    _add_decision_flags(status)
    _add_extra_backend_flag(status, "as admit serve runs with it: admit status looks at the objects of the "
                                    "enabled backends and of those a listed workload or pod asks for")


def _add_certs_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``admit certs``: a development CA and serving certificate."""
    certs = sub.add_parser(
        "certs", help="write a development CA and serving certificate",
        description="Write a development CA (ca.crt, ca.key) and a serving certificate for the admit Service and "
                    "127.0.0.1 (tls.crt, tls.key) into --dir; keys are mode 0600. A CA already in --dir is reused "
                    "(only the serving certificate is new, so whatever trusts the CA keeps working); --force makes a "
                    "new CA. For clusters, prefer the chart's --cert-mode self or cert-manager (docs/certificates.md).",
    )
    certs.add_argument("--dir", default="certs", help="output directory (default: %(default)s)")
    certs.add_argument("--service", default="admit", help="Service name for the SANs (default: %(default)s)")
    certs.add_argument("--namespace", default="default", help="Service namespace for the SANs (default: %(default)s)")
    certs.add_argument("--dns", action="append", default=[], help="extra DNS name (repeatable)")
    certs.add_argument("--ip", action="append", default=[], help="extra IP address (repeatable; 127.0.0.1 always)")
    certs.add_argument("--ca-days", type=int, default=3650, help="CA lifetime in days (default: %(default)s)")
    certs.add_argument("--leaf-days", type=int, default=365, help="serving certificate lifetime (default: %(default)s)")
    certs.add_argument("--force", action="store_true",
                       help="replace a CA already in --dir (certificates it issued stop verifying)")


def config_from_args(args: argparse.Namespace) -> Config:
    """The :class:`Config` the parsed flags describe; the backend names a workload's ``<prefix>/backend`` may give
    are ``registry.BACKENDS``'s (``Config.known_backends``)."""
    known = _backend_names()
    legacy = args.pod_group_api == LEGACY_POD_GROUP_API_GROUP
    return Config(
        pod_group_group=args.pod_group_api,
        pod_group_label=LEGACY_POD_GROUP_LABEL if legacy else POD_GROUP_LABEL,
        annotation_prefix=args.annotation_prefix,
        scheduler_name=args.scheduler_name,
        kubeflow_gang_by_operator=args.kubeflow_gang_by_operator,
        ignored_api_groups=frozenset(args.ignore_api_group),
        failure_mode=getattr(args, "failure_mode", "deny"),
        api_timeout_seconds=getattr(args, "api_timeout", 3.0),
        gang_backend=args.gang_backend,
        # admit status lists every backend's objects; admit review enables what admit serve enables
        extra_gang_backends=frozenset(getattr(args, "extra_gang_backend", known)),
        known_backends=known,
        workload_api_version=getattr(args, "workload_api_version", ""),
        controller_gangs=frozenset(getattr(args, "controller_gang", ())),
        read_timeout_seconds=getattr(args, "read_timeout", 5.0),
    )


def _cmd_review(args: argparse.Namespace) -> int:
    from .review import (InputError, Skipped, accept_warnings, format_lines, format_text, load_documents,
                         nothing_reviewed, review_documents)

    config = config_from_args(args)
    errors: list[str] = []
    skipped = Skipped()
    try:
        docs = load_documents(args.paths, args.recursive, errors=errors, skipped=skipped)
        results = asyncio.run(review_documents(docs, config, errors=errors, namespace=args.namespace)) if docs else []
        accept_warnings(results, args.accept_warning)
    except InputError as e:
        print(f"admit review: cannot read {e}", file=sys.stderr)
        return 2
    except re.error as e:
        print(f"admit review: --accept-warning {e.pattern!r} is not a regular expression: {e}", file=sys.stderr)
        return 2
    for error in errors:  # reported, and the rest reviewed: one broken file does not hide the others' verdicts
        print(f"admit review: cannot read {error}", file=sys.stderr)
    for note in skipped.folders:  # as kubectl apply -f DIR without -R: not read, and said so; never a failure
        print(f"admit review: {note}", file=sys.stderr)
    if args.output in ("json", "yaml") and skipped.summary():  # the table says it in its summary
        print(f"admit review: {skipped.summary()}", file=sys.stderr)
    if args.output == "json":
        print(json.dumps(results, indent=2, default=str))
    elif args.output == "yaml":
        import yaml

        print(yaml.safe_dump(json.loads(json.dumps(results, default=str)), sort_keys=False), end="")
    elif args.verbose:
        print(format_text(results, show_objects=not args.no_objects, skipped=skipped))
    else:
        print(format_lines(results, errors, skipped))
    if errors:
        return 2
    if not results:  # an empty List, or a folder of values files and templates only: nothing was checked
        print(f"admit review{' --strict: exit 1' if args.strict else ''}: {nothing_reviewed(args.paths, skipped)}",
              file=sys.stderr)
        return 1 if args.strict else 0
    warned = sum(1 for r in results if r["warnings"])
    if args.strict and warned:
        # the one-line view shows every warning of an allowed object; a denied one's row gives the refusal instead
        hidden = args.output == "text" and not args.verbose and any(r["warnings"] and not r["allowed"] for r in results)
        print(f"admit review --strict: exit 1: {warned} object{'s' if warned != 1 else ''} with warnings"
              + (" (-v shows those of the denied ones)" if hidden else ""), file=sys.stderr)
        return 1
    return 0 if all(r["allowed"] for r in results) else 1


def _cmd_certs(args: argparse.Namespace) -> int:
    from ..tls.certs import CertificateError, write_development_certificates

    ips = ["127.0.0.1", *[ip for ip in args.ip if ip != "127.0.0.1"]]
    existed = (Path(args.dir) / "ca.crt").exists()
    try:
        paths = write_development_certificates(Path(args.dir), args.service, args.namespace, args.dns, ips,
                                               args.ca_days, args.leaf_days, force_new_ca=args.force)
    except CertificateError as e:
        print(f"admit certs: {e}", file=sys.stderr)
        return 1
    for name, path in sorted(paths.items()):
        print(f"{name}: {path}")
    if existed and not args.force:
        print(f"kept the existing CA in {args.dir} and issued a new serving certificate from it (--force: a new CA)")
    return 0


def _cmd_status(args: argparse.Namespace) -> int:
    from kubernetes_asyncio.config import ConfigException

    from .status import run_status

    try:
        return asyncio.run(run_status(args, config_from_args(args)))
    except KeyboardInterrupt:
        return 0
    except ConfigException as e:
        print(f"admit status: {e}", file=sys.stderr)
        return 1


def _cmd_serve(args: argparse.Namespace) -> int:
    from kubernetes_asyncio.config import ConfigException

    from ..backends.common import BackendUnavailable
    from ..tls.certs import CertificateError
    from ..eventloop import run
    from .serve import serve

    from ..observability.logs import configure_logging

    configure_logging(args.log_level, args.log_format)
    if args.dev:  # the fake API's kit, imported only for --dev (admit serve's RSS: docs/performance.md)
        from .dev import serve_dev
    try:
        run((serve_dev if args.dev else serve)(args, config_from_args(args)))
    except KeyboardInterrupt:
        pass
    except CertificateError as e:
        logging.getLogger("admit").error("cannot start: %s%s", e, _missing_certificates_hint(args))
        return 1
    except (ConfigException, BackendUnavailable, OSError) as e:  # OSError: a port in use, an unreadable file
        logging.getLogger("admit").error("cannot start: %s", e)
        return 1
    return 0


def _missing_certificates_hint(args: argparse.Namespace) -> str:
    """What to run when ``admit serve`` (``--cert-mode files``, not ``--dev``) finds no serving pair at
    ``--tls-cert-file`` / ``--tls-key-file``; ``""`` when both files exist (then the pair itself is wrong)."""
    if args.dev or args.cert_mode != "files":
        return ""
    if os.path.exists(args.tls_cert_file) and os.path.exists(args.tls_key_file):
        return ""
    folder = os.path.dirname(args.tls_cert_file) or "."
    certs = "admit certs" if os.path.normpath(folder) == "certs" else f"admit certs --dir {folder}"
    return (f"; to try admit locally, `{certs}` writes a development pair there, or `admit serve --dev` runs it "
            "against an in-memory fake Kubernetes API")


def _review_args(parser: argparse.ArgumentParser, argv: list[str], args: argparse.Namespace) -> argparse.Namespace:
    """``admit review``'s arguments; with ``--values FILE``, parsed again with the serve flags the chart gives for FILE
    (``values.serve_flags``) before the command line's own, so that those add to or override them. Refused as argparse
    refuses any wrong argument (usage and exit 2): a bad FILE (``values.ValuesError``), and ``--no-objects`` without
    ``-v`` or with ``-o json/yaml``."""
    from .values import ValuesError, load_values, serve_flags

    review = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices["review"]
    if args.values:
        try:
            flags = serve_flags(load_values(args.values), args.values)
        except ValuesError as e:
            review.error(str(e))
        at = argv.index("review") + 1
        args = parser.parse_args([*argv[:at], *flags, *argv[at:]])
    if args.no_objects and not (args.verbose and args.output == "text"):
        review.error("argument --no-objects: only with -v (-v shows the mutated objects, --no-objects leaves them "
                     "out; the one-line view never shows them, -o json/yaml always do)")
    return args


def _parse(parser: argparse.ArgumentParser, arguments: list[str]) -> argparse.Namespace:
    """``parser.parse_args(arguments)``, but an argument no command takes is refused by its command's parser
    (``admit review: error: unrecognized arguments: --bogus``, argparse's words), before a missing command or ``admit
    review``'s missing path is. Raises ``SystemExit(2)``."""
    args, extra = parser.parse_known_args(arguments)
    if args.command is None:
        parser.error(f"unrecognized arguments: {' '.join(extra)}" if extra
                     else "the following arguments are required: command")
    command = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[args.command]
    if extra:
        command.error(f"unrecognized arguments: {' '.join(extra)}")
    if args.command == "review" and not args.paths:
        command.error("the following arguments are required: FILE|DIR|-")
    return args


def main(argv: Sequence[str] | None = None) -> Any:
    """Entry point of the ``admit`` console script; returns the process exit code."""
    parser = build_parser()
    arguments = list(sys.argv[1:] if argv is None else argv)
    args = _parse(parser, arguments)
    if args.command == "review":
        args = _review_args(parser, arguments, args)
    handler = {"review": _cmd_review, "certs": _cmd_certs, "serve": _cmd_serve, "status": _cmd_status}[args.command]
    try:
        return handler(args)
    except BrokenPipeError:  # `admit review ... | head`: the reader left; not an error of ours
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
