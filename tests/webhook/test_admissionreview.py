"""``admissionreview.parse_review`` reads a request of the shape kube-apiserver sends at one look
(``_plain_request``) and any other field by field (``_checked_request``, whose refusals name the field): both reads
give the same answer for every request, whichever of them reads it."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from admit.webhook.admissionreview import (AdmissionRequest, BadReview, _checked_request, _plain_request, dumps,
                                           parse_review)
from tests.helpers import admission_review, controller_pod, example

DEPLOYMENT = example("pause-gang-deployment.yaml")
POD = controller_pod(DEPLOYMENT)
REVIEWS = {
    "pod create": admission_review(POD),
    "pod create, dry run": admission_review(POD, dry_run=True),
    "pod create, no name (generateName)": admission_review(POD, name=""),
    "deployment create": admission_review(DEPLOYMENT),
    "deployment update": admission_review(DEPLOYMENT, "UPDATE", old=DEPLOYMENT),
    "deployment delete": admission_review(None, "DELETE", old=DEPLOYMENT),
    "deployments/scale update": admission_review(
        {"apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": {"name": "pause", "namespace": "default"},
         "spec": {"replicas": 6}}, "UPDATE",
        old={"apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": {"name": "pause", "namespace": "default"},
             "spec": {"replicas": 8}},
        sub_resource="scale", resource=("apps", "v1", "deployments"), kind=("autoscaling", "v1", "Scale")),
}


def outcome(read: Any, api_version: str, request: dict[str, Any]) -> AdmissionRequest | str:
    """What ``read`` gives for ``request``: the AdmissionRequest, or the refusal's message."""
    try:
        return read(api_version, request)  # type: ignore[no-any-return]
    except BadReview as e:
        return f"400: {e}"


def test_every_review_kube_apiserver_sends_is_read_at_one_look_as_the_field_by_field_read_reads_it():
    for name, review in REVIEWS.items():
        request = review["request"]
        plain = _plain_request(review["apiVersion"], request)
        assert plain is not None, name
        assert plain == _checked_request(review["apiVersion"], request), name
        assert parse_review(dumps(review)) == plain, name


# Each field of ``request`` admit reads: its value as kube-apiserver sends it, or one of the shapes Go's decoder
# also takes (null) or that only a client other than kube-apiserver sends.
ABSENT = object()
JSON_ODDS = st.sampled_from([None, "", "x", 0, 1.5, True, False, [], ["CREATE"], {}, {"a": 1}])
ODD_VALUES = st.just(ABSENT) | JSON_ODDS
OPERATIONS = st.sampled_from(["CREATE", "UPDATE", "DELETE", "CONNECT", "PATCH", "create"])
GROUP_VERSION = st.fixed_dictionaries({}, optional={
    "group": st.sampled_from(["", "apps"]) | JSON_ODDS, "version": st.sampled_from(["v1"]) | JSON_ODDS,
    "kind": st.sampled_from(["Pod", "Deployment"]) | JSON_ODDS,
    "resource": st.sampled_from(["pods", "deployments"]) | JSON_ODDS})


@settings(max_examples=600, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(data=st.data())
def test_a_request_with_any_field_of_any_shape_gets_the_same_answer_from_both_reads(data):
    review = copy.deepcopy(data.draw(st.sampled_from(sorted(REVIEWS.items())))[1])
    request = review["request"]
    for field, values in {"uid": st.sampled_from(["a-uid"]) | ODD_VALUES, "operation": OPERATIONS | ODD_VALUES,
                          "kind": GROUP_VERSION | ODD_VALUES, "resource": GROUP_VERSION | ODD_VALUES,
                          "object": st.just({"kind": "Pod"}) | ODD_VALUES,
                          "oldObject": st.just({"kind": "Pod"}) | ODD_VALUES,
                          "dryRun": st.booleans() | ODD_VALUES, "subResource": st.sampled_from(["scale"]) | ODD_VALUES,
                          "name": st.sampled_from(["pause"]) | ODD_VALUES,
                          "namespace": st.sampled_from(["team"]) | ODD_VALUES}.items():
        if data.draw(st.booleans(), label=f"change {field}"):
            value = data.draw(values, label=field)
            if value is ABSENT:
                request.pop(field, None)
            else:
                request[field] = value
    checked = outcome(_checked_request, review["apiVersion"], request)
    plain = _plain_request(review["apiVersion"], request)
    assert plain is None or plain == checked  # what the one look accepts, the field-by-field read accepts alike
    try:
        parsed: AdmissionRequest | str = parse_review(dumps(review))
    except BadReview as e:
        parsed = f"400: {e}"
    assert parsed == checked
