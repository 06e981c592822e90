"""``admit serve --dev``: the whole server on a laptop, without a cluster (README, "Try it without a cluster"):
``admit serve`` against the in-memory fake kube-apiserver (:mod:`admit.testing.fake_kube`), whose writes go through
admit's own webhooks as the chart registers them, so ``kubectl --server $ADMIT_FAKE_API`` answers as a cluster with
admit installed (:func:`serve_dev`).
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import Any

from ..config import Config

__all__ = ["serve_dev", "store_walkthrough_workloads", "walkthrough_folder", "webhook_configurations",
           "dev_admission_chain", "FAKE_API_ENV"]

#: The variables ``<cert dir>/dev.env`` exports for the walk-through's ``curl`` commands: the fake API's URL, and
#: the webhook's own (its --port).
FAKE_API_ENV = "ADMIT_FAKE_API"
WEBHOOK_URL_ENV = "ADMIT_URL"
#: Where the walk-through's files are looked for, in order: ``examples/`` of the folder admit runs in (the README's
#: ``curl --data @examples/...`` reads them there), then the source tree of an editable install.
EXAMPLES_SEARCH = (Path("examples"), Path(__file__).resolve().parents[2] / "examples")
#: kube-apiserver sends a BOOKMARK on watches that ask for them about once a minute (``watch.go``'s bookmark
#: timer); admit's caches take a watch with nothing for longer as dead and watch again, with a warning each time.
DEV_BOOKMARK_SECONDS = 60.0
#: Files of the walk-through (README, "Try it without a cluster") whose workloads dev mode stores: an AdmissionReview
#: (its ``request.object``) or a manifest.
WALKTHROUGH = ("admission-review-deployment-validate.json", "web-gang-deployment.yaml")
#: Further example manifests dev mode stores: the workloads the example AdmissionReviews under ``examples/denied/``
#: scale (``admission-review-scale-from-zero.json`` scales ``batch-workers``), so that their scales are checked.
SCALED_EXAMPLES = ("paused-gang-deployment.yaml",)
#: The runtime ``trainjob-torch.yaml`` names, as Kubeflow Trainer installs it: a TrainJob is judged against it.
TRAINER_RUNTIMES = ("clustertrainingruntime-torch-distributed.yaml",)

#: Where admit's webhook configurations are read from, in order (as :data:`EXAMPLES_SEARCH`): the plain manifest,
#: the chart rendered with its default values.
MANIFEST_SEARCH = (Path("deploy") / "admit.yaml", Path(__file__).resolve().parents[2] / "deploy" / "admit.yaml")
#: A webhook's ``timeoutSeconds`` when it sets none (admissionregistration/v1 defaulting).
DEFAULT_WEBHOOK_TIMEOUT = 10

log = logging.getLogger("admit.dev")


async def serve_dev(args: argparse.Namespace, config: Config) -> None:
    """Run :func:`admit.cli.serve.serve` against a fresh :class:`~admit.testing.fake_kube.FakeKubeAPI` on a free
    loopback port, with development certificates written (or reused) next to ``--tls-cert-file`` (as ``admit
    certs``), the walk-through's workloads stored (:func:`store_walkthrough_workloads`), writes admitted by
    :func:`dev_admission_chain`, and ``export ADMIT_FAKE_API=<url>`` / ``export ADMIT_URL=https://127.0.0.1:<port>``
    in ``<cert dir>/dev.env``. Ctrl-C stops it at once (no ``--shutdown-delay``: no Endpoints route here).

    Changes ``args`` in place: ``api_server`` (the fake), ``cert_mode`` ``files``, ``host`` 127.0.0.1 unless given.

    Raises:
        CertificateError: a CA next to ``--tls-cert-file`` that cannot be reused (``admit certs --force`` replaces it).
        OSError: ``--port`` is taken on the host (another ``admit serve --dev``; the message names a free port to pass
            instead), found before anything is written.
    """
    from ..tls.certs import write_development_certificates
    from .serve import serve
    from ..testing.fake_kube import FakeKubeAPI

    cert = Path(args.tls_cert_file)
    if args.host in ("", "0.0.0.0"):  # every address: the dev server stays on loopback
        args.host = "127.0.0.1"
    # Before the certificates and dev.env are written: a second --dev must neither repoint the first one's dev.env
    # nor replace the serving pair the first one hot-reloads.
    _check_port_free(args.host, args.port)
    paths = write_development_certificates(cert.parent, ip_addresses=["127.0.0.1"])
    args.tls_cert_file, args.tls_key_file = str(paths["tls.crt"]), str(paths["tls.key"])
    args.cert_mode = "files"
    args.shutdown_delay = 0.0
    chain, chain_note = dev_admission_chain(f"https://{args.host}:{args.port}", paths["ca.crt"])
    # As a cluster: writes into a namespace that does not exist are refused (NamespaceLifecycle), and warnings come
    # back as Warning headers (kubectl prints them). It runs until Ctrl-C: the requests are counted, not kept.
    async with FakeKubeAPI(bookmark_interval=DEV_BOOKMARK_SECONDS, admission=chain, namespace_lifecycle=True,
                           record_requests=False) as fake:
        args.api_server = fake.url
        examples = walkthrough_folder()
        stored = store_walkthrough_workloads(fake, config, examples) if examples else []
        if not stored:
            log.warning("dev mode: no walk-through files (%s) in ./examples: run `admit serve --dev` from the "
                        "repository root to have the fake hold the walk-through's Deployments", ", ".join(WALKTHROUGH))
        env_file = cert.parent / "dev.env"
        env_file.write_text(f"export {FAKE_API_ENV}={fake.url}\nexport {WEBHOOK_URL_ENV}=https://{args.host}:{args.port}\n")
        log.info("dev mode: fake Kubernetes API at %s (in memory), holding %s; %s; for the walk-through run: "
                 "source %s   (sets %s and %s); CA for curl --cacert: %s", fake.url, ", ".join(stored) or "nothing",
                 chain_note, env_file, FAKE_API_ENV, WEBHOOK_URL_ENV, paths["ca.crt"])
        await serve(args, config)


def _check_port_free(host: str, port: int) -> None:
    """Raise ``OSError`` naming a free port when ``host:port`` cannot be bound (with ``SO_REUSEADDR``, as aiohttp's
    server binds on Linux, so a port in TIME_WAIT counts as free)."""
    import socket

    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
            return
        except OSError as e:
            problem = e
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as spare:
        spare.bind((host, 0))
        free = spare.getsockname()[1]
    raise OSError(problem.errno, f"{host}:{port} is taken ({problem.strerror}; another `admit serve --dev`?): pass "
                                 f"--port {free}, or stop the other server; its dev.env is left as it was")


def webhook_configurations(search: tuple[Path, ...] = MANIFEST_SEARCH) -> tuple[list[dict[str, Any]], Path | None]:
    """admit's ``MutatingWebhookConfiguration`` and ``ValidatingWebhookConfiguration`` as the chart renders them with
    its default values: read from the first file of ``search`` (:data:`MANIFEST_SEARCH`, the plain manifest
    ``deploy/admit.yaml`` that ``hack/release.py manifest`` writes and ``tests/release/test_release.py`` keeps equal
    to ``helm template``). Returns ``(configurations, file)``, or ``([], None)`` when no file is found."""
    import yaml

    path = next((p for p in search if p.is_file()), None)
    if path is None:
        return [], None
    kinds = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
    return [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict) and d.get("kind") in kinds], path


def dev_admission_chain(url: str, ca_file: Path, configurations: list[dict[str, Any]] | None = None,
                        *, cel: bool | None = None, search: tuple[Path, ...] = MANIFEST_SEARCH) -> tuple[Any, str]:
    """The fake API's admission chain for dev mode: admit's webhooks as the chart registers them (rules,
    namespaceSelector, matchConditions, failurePolicy, reinvocationPolicy; :func:`webhook_configurations` of
    ``search`` when ``configurations`` is None), each called at ``url`` (``https://127.0.0.1:<port>``, this process's
    own ``/mutate`` and ``/validate``) trusting the CA in ``ca_file``, within the longest ``timeoutSeconds`` of the
    webhooks (:data:`DEFAULT_WEBHOOK_TIMEOUT` for one without). A ``kubectl scale`` below minMember is then refused
    with admit's message. ``url`` needs to answer only once the fake gets writes: until then nothing calls it.

    The matchConditions are CEL, evaluated with cel-python (the test extra): ``cel`` False (None: False when ``celpy``
    cannot be imported) drops them, and admit itself answers the objects they would skip (allowed, unchanged).

    Returns ``(chain, note)``: an :class:`~admit.testing.fake_kube.AdmissionChain` and a phrase for the startup log;
    ``(None, note)`` when no configuration is found (writes are then stored as given, without admission)."""
    import importlib.util
    import ssl

    from ..testing.fake_kube import AdmissionChain

    source = "the given configurations"
    if configurations is None:
        configurations, path = webhook_configurations(search)
        if path is None:
            return None, ("writes to it skip admit's webhooks (no deploy/admit.yaml here: run `admit serve --dev` "
                          "from the repository root)")
        source = str(path)
    configurations = [dict(c) for c in configurations]
    if cel is None:
        cel = importlib.util.find_spec("celpy") is not None
    if not cel:
        for conf in configurations:
            conf["webhooks"] = [{k: v for k, v in hook.items() if k != "matchConditions"}
                                for hook in conf.get("webhooks") or []]
    hooks = [hook for conf in configurations for hook in conf.get("webhooks") or []]
    timeout = float(max((hook.get("timeoutSeconds") or DEFAULT_WEBHOOK_TIMEOUT for hook in hooks),
                        default=DEFAULT_WEBHOOK_TIMEOUT))
    context = ssl.create_default_context(cafile=str(ca_file))
    chain = AdmissionChain.from_configurations(configurations, url, context, timeout=timeout)
    note = (f"its writes go through admit's {len(hooks)} webhooks of {source} at {url}"
            + ("" if cel else " (without their CEL matchConditions: cel-python is not installed)"))
    return chain, note


def walkthrough_folder(search: tuple[Path, ...] = EXAMPLES_SEARCH) -> Path | None:
    """The first folder of ``search`` (:data:`EXAMPLES_SEARCH`) that holds a walk-through file, else ``None``."""
    return next((folder for folder in search if any((folder / name).is_file() for name in WALKTHROUGH)), None)


def store_walkthrough_workloads(fake: Any, config: Config, examples: Path) -> list[str]:
    """Store in ``fake`` the workloads of the walk-through (:data:`WALKTHROUGH`), of :data:`SCALED_EXAMPLES` (what
    the example Scale reviews scale) and Trainer's runtime (:data:`TRAINER_RUNTIMES`) as kube-apiserver stores an object
    once its webhooks allowed it: the ``request.object`` of an AdmissionReview (already mutated), or a manifest
    after admit's own ``/mutate`` patch (:func:`admit.webhook.mutate.mutate`, so it carries the label the controller
    watches). Without them the controller would find the PodGroup that ``/validate`` creates claimed by no stored
    workload and delete it after ``--orphan-grace-period`` (60 s), under a reader who pauses; and a ``kubectl
    scale`` review would find no workload to check. Returns ``["Deployment default/pause", ...]``; files that are
    missing (an install without the repository's examples/) are skipped."""
    import jsonpatch

    from ..webhook.mutate import mutate
    from .review import load_documents, manifest_request

    stored = []
    for name in (*WALKTHROUGH, *SCALED_EXAMPLES, *TRAINER_RUNTIMES):
        path = examples / name
        if not path.is_file():
            continue
        if path.suffix == ".json":
            objects = [json.loads(path.read_text())["request"]["object"]]
        else:
            objects = []
            for _, doc in load_documents([str(path)]):
                patch = mutate(manifest_request(doc), config).patch  # pure: no API call, nothing logged
                objects.append(jsonpatch.apply_patch(doc, patch) if patch else doc)
        for obj in objects:
            namespace = obj["metadata"].get("namespace", "default")
            if fake.get("v1", "namespaces", None, namespace) is None:  # its namespace first, as kubectl apply needs
                fake.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
            meta = fake.put(obj)["metadata"]  # a cluster-scoped object keeps no namespace
            stored.append(f"{obj['kind']} {meta['namespace'] + '/' if 'namespace' in meta else ''}{meta['name']}")
    return stored
