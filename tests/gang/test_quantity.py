from fractions import Fraction

import pytest

from admit.gang.quantity import QuantityError, format_quantity, parse_quantity
from admit.gang.resources import ResourceError, gang_min_resources, pod_requests


@pytest.mark.parametrize(
    "text,value",
    [
        ("250m", Fraction(1, 4)),
        ("1.5", Fraction(3, 2)),
        ("2", Fraction(2)),
        ("512Mi", 512 * 2**20),
        ("1Gi", 2**30),
        ("1G", 10**9),
        ("1e3", 1000),
        ("100k", 100_000),
        (".5", Fraction(1, 2)),
        (3, 3),
    ],
)
def test_kubernetes_quantities_parse_to_exact_numbers(text, value):
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["12x", "", "1.2.3", "Mi", "abc", True, None, [1]])
def test_malformed_quantities_raise_a_quantity_error_naming_the_value(text):
    with pytest.raises(QuantityError):
        parse_quantity(text)


def test_cpu_formats_as_whole_cores_or_millicores():
    assert format_quantity("cpu", Fraction(3)) == "3"
    assert format_quantity("cpu", Fraction(3, 2)) == "1500m"
    assert format_quantity("cpu", Fraction(1, 3000)) == "1m"  # rounded up like Kubernetes


def test_memory_formats_in_the_largest_exact_binary_unit():
    assert format_quantity("memory", Fraction(3 * 2**30)) == "3Gi"
    assert format_quantity("memory", Fraction(1536 * 2**20)) == "1536Mi"
    assert format_quantity("memory", Fraction(10**9)) == "1000000000"


def test_mixed_units_add_up_exactly_in_min_resources():
    spec = {"containers": [
        {"name": "a", "resources": {"requests": {"cpu": "500m", "memory": "1G"}}},
        {"name": "b", "resources": {"requests": {"cpu": "0.25", "memory": "512Mi"}}},
    ]}
    result = gang_min_resources([(spec, 4)])
    assert result["cpu"] == "3"
    assert parse_quantity(result["memory"]) == 4 * (10**9 + 512 * 2**20)
    assert result["memory"] == "6003402Ki"


def test_limits_stand_in_for_missing_requests_as_kube_apiserver_defaults_them():
    spec = {"containers": [{"name": "a", "resources": {"limits": {"cpu": "1", "memory": "1Gi"},
                                                         "requests": {"cpu": "200m"}}}]}
    assert pod_requests(spec) == {"cpu": Fraction(1, 5), "memory": 2**30}


def test_the_larger_of_init_containers_and_regular_containers_counts_per_resource():
    spec = {
        "initContainers": [{"name": "init", "resources": {"requests": {"cpu": "2", "memory": "128Mi"}}}],
        "containers": [{"name": "main", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}],
    }
    assert pod_requests(spec) == {"cpu": 2, "memory": 2**30}


def test_sidecar_init_containers_add_to_the_regular_containers():
    spec = {
        "initContainers": [
            {"name": "proxy", "restartPolicy": "Always", "resources": {"requests": {"cpu": "100m"}}},
            {"name": "migrate", "resources": {"requests": {"cpu": "1"}}},
        ],
        "containers": [{"name": "main", "resources": {"requests": {"cpu": "500m"}}}],
    }
    # running: 500m + 100m sidecar; init peak: 1 + 100m sidecar already started
    assert pod_requests(spec) == {"cpu": Fraction(11, 10)}


def test_pod_overhead_is_added_to_the_pod_request():
    spec = {"containers": [{"name": "a", "resources": {"requests": {"cpu": "1"}}}],
            "overhead": {"cpu": "250m", "memory": "120Mi"}}
    assert pod_requests(spec) == {"cpu": Fraction(5, 4), "memory": 120 * 2**20}


def test_an_unparseable_request_names_the_container_and_resource():
    spec = {"containers": [{"name": "web", "resources": {"requests": {"memory": "12x"}}}]}
    with pytest.raises(ResourceError,
                       match="container web: resources.requests.memory: .12x. is not a Kubernetes quantity"):
        pod_requests(spec)
