#!/usr/bin/env python3
"""Release steps of admit that run the same on a laptop and in .github/workflows/release.yml.

No helm binary anywhere: the chart is rendered, packaged and pushed with Helm's own Go SDK through
``helm-python-sdk`` (installed by ``pip install -e '.[test]'``), the engine of ``helm template`` / ``helm package`` /
``helm push``.

    python hack/release.py version [--tag v0.1.0]        # the version (admit/__init__.py); --tag: fail unless equal
    python hack/release.py manifest [-f values.yaml]... [-n admit-system] [-o deploy/admit.yaml]
    python hack/release.py package [--destination dist]  # dist/admit-<version>.tgz
    python hack/release.py push-chart dist/admit-0.1.0.tgz oci://ghcr.io/admit-dev/charts
    python hack/release.py notes                          # the CHANGELOG.md section of the version

``manifest`` is the plain-manifest install: the chart rendered as ``helm template`` would (install mode), preceded
by its Namespace and ordered as Helm installs kinds (``releaseutil.InstallOrder`` in helm's
``pkg/release/util/kind_sorter.go``), so ``kubectl apply -f`` creates what others depend on first. Without ``-o``
it writes to standard output. deploy/admit.yaml is this command with the default values (tests/release/test_release.py
fails when it is out of date).

``push-chart`` logs in when ``REGISTRY_USERNAME`` and ``REGISTRY_PASSWORD`` are set (the registry host is taken
from the remote), else pushes with the credentials helm already has (``~/.config/helm/registry/config.json``).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "charts" / "admit"

# helm pkg/release/v1/util/kind_sorter.go InstallOrder (the kinds this chart can render, in that order); webhook
# configurations are not in Helm's list, so they come after every listed kind, as Helm places unknown kinds. Helm
# lists PriorityClass first; the manifest starts with its Namespace and puts the PriorityClass right after it (both
# cluster-scoped, both before the pods that name them).
INSTALL_ORDER = [
    "Namespace", "PriorityClass", "NetworkPolicy", "ResourceQuota", "LimitRange", "PodSecurityPolicy", "PodDisruptionBudget",
    "ServiceAccount", "Secret", "SecretList", "ConfigMap", "StorageClass", "PersistentVolume",
    "PersistentVolumeClaim", "CustomResourceDefinition", "ClusterRole", "ClusterRoleList", "ClusterRoleBinding",
    "ClusterRoleBindingList", "Role", "RoleList", "RoleBinding", "RoleBindingList", "Service", "DaemonSet", "Pod",
    "ReplicationController", "ReplicaSet", "Deployment", "HorizontalPodAutoscaler", "StatefulSet", "Job", "CronJob",
    "IngressClass", "Ingress", "APIService", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration",
]


# Pod Security admission (kubernetes.io/docs/concepts/security/pod-security-admission): admit's pods meet the
# "restricted" standard (non-root, no privilege escalation, all capabilities dropped, RuntimeDefault seccomp), so the
# namespace enforces it: nothing less hardened can be started beside the webhook. tests/release/test_chart.py checks
# the rendered pods against it.
NAMESPACE_LABELS = {
    "pod-security.kubernetes.io/enforce": "restricted",
    "pod-security.kubernetes.io/audit": "restricted",
    "pod-security.kubernetes.io/warn": "restricted",
}


def version() -> str:
    """``admit.__version__`` read from admit/__init__.py as text (no import: works before ``pip install``)."""
    text = (ROOT / "admit" / "__init__.py").read_text()
    found = re.search(r'^__version__ = "([^"]+)"$', text, re.M)
    if not found:
        raise SystemExit("admit/__init__.py has no __version__ line")
    return found.group(1)


def release_notes() -> str:
    """The CHANGELOG.md section ``## [<version>] ...`` of the current version, without its heading.

    Raises:
        SystemExit: CHANGELOG.md has no section for the version (a release must say what it brings).
    """
    text = (ROOT / "CHANGELOG.md").read_text()
    found = re.search(rf"^## \[{re.escape(version())}\][^\n]*\n(.*?)(?=^## |^\[|\Z)", text, re.M | re.S)
    if not found:
        raise SystemExit(f"CHANGELOG.md has no section ## [{version()}]")
    return found.group(1).strip() + "\n"


def render_manifest(values: dict[str, Any] | None = None, namespace: str = "admit-system",
                    release: str = "admit") -> str:
    """The plain manifest: a Namespace and every object the chart renders with ``values``, as one YAML stream.

    Raises:
        helm_python.HelmError: the values do not pass values.schema.json or a template fails (Helm's message).
    """
    import helm_python as helm
    import yaml

    with helm.Chart.load(str(CHART)) as chart:
        rendered = chart.render(values or {}, name=release, namespace=namespace, is_install=True)
    docs = [doc for path, text in sorted(rendered.items()) if path.endswith(".yaml")
            for doc in yaml.safe_load_all(text) if doc]
    docs.insert(0, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace, "labels": NAMESPACE_LABELS}})
    rank = {kind: i for i, kind in enumerate(INSTALL_ORDER)}
    docs.sort(key=lambda d: rank.get(d.get("kind"), len(INSTALL_ORDER) - 2))  # stable: chart order within a kind
    header = (f"# admit {version()}: the chart charts/admit rendered for namespace {namespace}, release {release}.\n"
              "# Generated by `python hack/release.py manifest` (with -f FILE for your own values); do not edit.\n"
              "# Install: kubectl apply -f <this file>\n")
    return header + "".join("---\n" + yaml.safe_dump(d, sort_keys=False, width=120) for d in docs)


class UserError(Exception):
    """A mistake in what the user gave (a values file, a path): ``main`` prints ``str(e)`` on one line, exit 2."""


def _load_values(files: list[str]) -> dict[str, Any]:
    """The values files merged as ``helm -f`` merges them.

    Raises:
        UserError: a file is missing or unreadable, not YAML, or not a mapping.
    """
    import yaml

    merged: dict[str, Any] = {}
    for name in files:
        try:
            data = yaml.safe_load(Path(name).read_text()) or {}
        except OSError as e:
            raise UserError(f"{name}: cannot read the values file: {e.strerror or e}") from None
        except yaml.YAMLError as e:
            where = getattr(e, "problem_mark", None)
            at = f" (line {where.line + 1}, column {where.column + 1})" if where else ""
            raise UserError(f"{name}: not YAML{at}: {getattr(e, 'problem', None) or e}") from None
        if not isinstance(data, dict):
            raise UserError(f"{name}: a values file is a YAML mapping (key: value), not a {type(data).__name__}")
        merged = _merge(merged, data)
    return merged


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """Helm's rule for several -f files: later files win, maps merge key by key, anything else is replaced."""
    out = dict(base)
    for key, value in over.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def _one_line(error: Exception) -> str:
    """Helm's message on one line (its schema errors come as a list under the chart name)."""
    return " ".join(part.strip() for part in str(error).splitlines() if part.strip())


def main(argv: list[str] | None = None) -> int:
    """Run one command; every mistake is one line on stderr with exit 2 (1: the registry refused a push)."""
    try:
        return _main(argv)
    except UserError as e:
        print(f"hack/release.py: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # an output path that cannot be written, an archive that is not there
        where = f"{e.filename}: " if getattr(e, "filename", None) else ""
        print(f"hack/release.py: {where}{e.strerror or e}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as e:
        print(f"hack/release.py: {e.name} is not installed: pip install -e '.[test]' (helm-python-sdk, PyYAML)",
              file=sys.stderr)
        return 2
    except Exception as e:  # Helm's own errors: values against the schema, a template, a registry
        try:
            import helm_python as helm
        except ImportError:
            raise e from None
        if not isinstance(e, helm.HelmError):
            raise
        print(f"hack/release.py: {_one_line(e)}", file=sys.stderr)
        return 1 if isinstance(e, helm.HelmRegistryError) and "no such file" not in str(e) else 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        """One line, not argparse's usage block (exit 2, as argparse)."""
        self.exit(2, f"{self.prog}: {message} (--help shows the usage)\n")


def _main(argv: list[str] | None = None) -> int:
    parser = _Parser(prog="hack/release.py", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    v = sub.add_parser("version", help="print admit's version")
    v.add_argument("--tag", help="fail unless this git tag is v<version> (the release workflow's check)")
    m = sub.add_parser("manifest", help="render the chart into a plain manifest (no helm binary)")
    m.add_argument("-f", "--values", action="append", default=[], help="values file (repeatable, as helm -f)")
    m.add_argument("-n", "--namespace", default="admit-system")
    m.add_argument("--release", default="admit", help="release name (the objects' name prefix)")
    m.add_argument("-o", "--output", help="write here instead of standard output")
    p = sub.add_parser("package", help="package the chart into <destination>/admit-<version>.tgz")
    p.add_argument("--destination", default="dist")
    sub.add_parser("notes", help="print the CHANGELOG.md section of the version (the GitHub release's notes)")
    push = sub.add_parser("push-chart", help="push a packaged chart to an OCI registry")
    push.add_argument("archive")
    push.add_argument("remote", help="oci://host/path (the chart lands at <remote>/admit:<version>)")
    args = parser.parse_args(argv)

    if args.command == "version":
        if args.tag is not None and args.tag != f"v{version()}":
            print(f"tag {args.tag} is not v{version()} (admit/__init__.py __version__ and Chart.yaml appVersion)",
                  file=sys.stderr)
            return 1
        print(version())
    elif args.command == "notes":
        sys.stdout.write(release_notes())
    elif args.command == "manifest":
        text = render_manifest(_load_values(args.values), args.namespace, args.release)
        if args.output:
            Path(args.output).write_text(text)
        else:
            sys.stdout.write(text)
    elif args.command == "package":
        import helm_python as helm

        if Path(args.destination).exists() and not Path(args.destination).is_dir():
            raise UserError(f"--destination {args.destination} is a file, not a folder")
        Path(args.destination).mkdir(parents=True, exist_ok=True)
        print(helm.package(str(CHART), destination=args.destination))
    elif args.command == "push-chart":
        import os

        import helm_python as helm

        if not Path(args.archive).is_file():
            raise UserError(f"{args.archive}: no such chart archive (hack/release.py package makes one)")
        if not args.remote.startswith("oci://"):
            raise UserError(f"remote {args.remote!r} is not oci://host/path")

        client = helm.RegistryClient()
        user, password = os.environ.get("REGISTRY_USERNAME"), os.environ.get("REGISTRY_PASSWORD")
        if user and password:
            client.login(args.remote.removeprefix("oci://").split("/", 1)[0], user, password)
        print(helm.push(args.archive, args.remote, client=client))
    return 0


if __name__ == "__main__":
    sys.exit(main())
