"""``admit serve --dev``: the whole server on a laptop, without a cluster.

It writes (or reuses) development certificates next to ``--tls-cert-file`` (``certs/`` by default, as
``admit certs`` does), starts the in-repo fake kube-apiserver (:mod:`admit.testing.fake_kube`, the one the tests and
the benchmark use) on a free loopback port, and runs ``admit serve`` against it with the PodGroup controller, on
``https://127.0.0.1:8443``. The log says where everything is; stop it with Ctrl-C. The fake keeps everything in
memory and forgets it on exit; it answers the REST calls admit makes (PodGroups, workloads, Leases, Events), so
``curl`` a gang workload's AdmissionReview at ``/validate`` and then read the PodGroup it created from the fake::

    admit serve --dev
    curl --cacert certs/ca.crt -H 'Content-Type: application/json' \\
      --data @examples/admission-review-deployment-validate.json https://127.0.0.1:8443/validate
    curl http://127.0.0.1:PORT/apis/scheduling.x-k8s.io/v1alpha1/podgroups   # PORT: from the log
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from .config import Config

__all__ = ["serve_dev"]

log = logging.getLogger("admit.dev")


async def serve_dev(args: argparse.Namespace, config: Config) -> None:
    """Run :func:`admit.serve.serve` against a fresh :class:`~admit.testing.fake_kube.FakeKubeAPI` (module docstring).

    Changes ``args`` in place: ``api_server`` (the fake), ``cert_mode`` ``files``, ``host`` 127.0.0.1 unless given.

    Raises:
        CertificateError: a CA next to ``--tls-cert-file`` that cannot be reused (``admit certs --force`` replaces it).
    """
    from .certs import write_development_certificates
    from .serve import serve
    from .testing.fake_kube import FakeKubeAPI

    cert = Path(args.tls_cert_file)
    paths = write_development_certificates(cert.parent, ip_addresses=["127.0.0.1"])
    args.tls_cert_file, args.tls_key_file = str(paths["tls.crt"]), str(paths["tls.key"])
    args.cert_mode = "files"
    if args.host == "0.0.0.0":
        args.host = "127.0.0.1"
    async with FakeKubeAPI() as fake:
        args.api_server = fake.url
        log.info("dev mode: fake Kubernetes API at %s (in memory; e.g. curl %s/apis/scheduling.x-k8s.io/v1alpha1/"
                 "podgroups); CA for curl --cacert: %s", fake.url, fake.url, paths["ca.crt"])
        await serve(args, config)
