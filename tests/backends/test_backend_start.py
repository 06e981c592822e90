"""``admit serve``'s start-time discovery, one hook per backend (``runtime.BackendAPI.start``), run by
``cli.serve.start_backends`` for the enabled backends only: what it finds reaches the Config and the admission."""

from __future__ import annotations

import pytest

from admit.backends.common import BackendUnavailable
from admit.cli.serve import start_backends
from admit.config import Config
from admit.kube.client import KubeAPI
from admit.testing.fake_kube import FakeKubeAPI
from admit.webhook.admission import Admission
from admit.webhook.admissionreview import dumps, parse_review
from tests.helpers import admission_review, example


async def test_a_cluster_without_the_pod_group_crd_gives_every_coscheduling_refusal_the_crd_and_its_fixes():
    async with FakeKubeAPI() as fake:
        fake.unregister("scheduling.x-k8s.io/v1alpha1", "podgroups")
        async with fake.api_client() as api_client:
            config, problems, rediscoveries = await start_backends(api_client, Config())
            assert list(problems) == ["coscheduling"] and rediscoveries == {}
            assert "the PodGroup CRD podgroups.scheduling.x-k8s.io" in problems["coscheduling"]
            admission = Admission(config, KubeAPI(api_client))
            admission.problems = problems
            req = parse_review(dumps(admission_review(example("pause-gang-deployment.yaml"))))
            decision = await admission.validate(req)
    assert not decision.allowed and decision.code == 503
    assert problems["coscheduling"] in decision.message and "Retry" not in decision.message


async def test_a_backend_not_enabled_runs_no_discovery_at_start():
    async with FakeKubeAPI(workload_api="v1beta1") as fake:
        async with fake.api_client() as api_client:
            config, problems, rediscoveries = await start_backends(api_client, Config(gang_backend="workload-api"))
        assert config.workload_api_version == "v1beta1" and problems == {}
        assert list(rediscoveries) == ["workload-api"]
        assert not any(r.path.startswith("/apis/scheduling.x-k8s.io") for r in fake.requests)


async def test_the_default_backend_not_served_stops_admit_at_start():
    async with FakeKubeAPI() as fake:
        async with fake.api_client() as api_client:
            with pytest.raises(BackendUnavailable):
                await start_backends(api_client, Config(gang_backend="workload-api"))
