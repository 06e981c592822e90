"""The emulations' quantities (tests/emulations/quantity.py) print and add as apimachinery's resource.Quantity and
component-helpers' PodRequests do, so the PodGroups the Trainer emulation makes carry what Trainer would write."""

from __future__ import annotations

import pytest

from tests.emulations.quantity import canonical, parse, pod_requests, scaled, summed


@pytest.mark.parametrize("written, printed", [
    ("1.5", "1500m"), ("8000", "8k"), ("0.1", "100m"), ("512Mi", "512Mi"), ("1.5Gi", "1536Mi"), ("1023Ki", "1023Ki"),
    ("2048Ki", "2Mi"), ("1e3", "1e3"), ("0", "0"), ("1n", "1n"), (" 2 ", "2"),
])
def test_a_quantity_prints_in_its_canonical_form_as_kube_apiserver_stores_it(written, printed):
    assert parse(written).canonical() == printed


def test_a_sum_keeps_the_format_of_its_first_non_zero_quantity_and_a_product_its_own():
    total = summed({}, {"memory": parse("512Mi"), "cpu": parse("250m")})
    total = summed(total, {"memory": parse("512Mi"), "cpu": parse("1750m")})
    assert canonical(scaled(total, 2)) == {"memory": "2Gi", "cpu": "4"}


def test_a_pods_requests_count_its_sidecars_and_the_largest_init_container_as_pod_requests_does():
    spec = {"containers": [{"name": "node", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
                           {"name": "side", "resources": {"requests": {"cpu": "500m"}}}],
            "initContainers": [{"name": "proxy", "restartPolicy": "Always", "resources": {"requests": {"cpu": "1"}}},
                               {"name": "fetch", "resources": {"requests": {"cpu": "3", "memory": "512Mi"}}}],
            "overhead": {"cpu": "100m"}}
    # containers 1.5 + the sidecar 1 = 2.5; the init container 3 + the sidecar started before it 1 = 4; + overhead
    assert canonical(pod_requests(spec)) == {"cpu": "4100m", "memory": "1Gi"}


def test_a_value_that_is_not_a_quantity_is_refused():
    with pytest.raises(ValueError):
        parse("1.5 cores")
