"""Test helpers shipped with admit (a fake Kubernetes API over HTTP), the kit `admit serve --dev` runs, used by ``tests/`` and ``bench/`` too."""
