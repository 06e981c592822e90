"""Test helpers shipped with admit (a fake Kubernetes API over HTTP), used by ``tests/`` and ``bench/``."""
