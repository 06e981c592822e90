"""Every warning admit can give reaches the user with its fix, after kube-apiserver's own cuts.

kube-apiserver keeps a request's warnings whole while their sum stays within 4,096 runes; past that it cuts each to
256 runes and drops those that no longer fit (``k8s.io/apiserver/pkg/endpoints/filters/warning.go``, ``recorder
.AddWarning``: ``truncateAtTotalRunes = 4 * 1024``, ``truncateItemRunes = 256``). :func:`kube_apiserver_warnings`
emulates that recorder; the corpus (``warning_corpus.py``) drives each warning with an input that produces it, with
names as long as Kubernetes allows, behind other admission plugins' warnings (Pod Security and policy engines in warn
mode) that push the sum past 4,096.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from admit.cli import build_parser, config_from_args
from admit.cli.review import review_documents
from admit.webhook.admissionreview import (ANSWER_WARNING_RUNES, WARNING_ITEM_RUNES, WARNING_TOTAL_RUNES, Decision,
                                           review_response)
from admit.testing.fake_kube.admission import TRUNCATE_AT_TOTAL_RUNES, warning_headers

from tests.webhook.warning_corpus import CASES, Case

FIX_WITHIN = 120  # Kubernetes' docs ask webhooks for warnings of 120 characters where possible

# What other admission plugins in warn mode say about a pod template: Pod Security "restricted" (its real words,
# k8s.io/pod-security-admission policy checks) and two policy engines, about 4,200 runes together.
OTHERS = [
    'would violate PodSecurity "restricted:latest": allowPrivilegeEscalation != false (container "w" must set '
    "securityContext.allowPrivilegeEscalation=false), unrestricted capabilities (container \"w\" must set "
    'securityContext.capabilities.drop=["ALL"]), runAsNonRoot != true (pod or container "w" must set '
    'securityContext.runAsNonRoot=true), seccompProfile (pod or container "w" must set '
    'securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")',
    *[f"policy engine {i}: " + "the image must come from the approved registry and carry a digest; " * 30
      for i in range(2)],
]


def kube_apiserver_warnings(texts: list[str]) -> list[str]:
    """The warning texts kube-apiserver sends for ``texts`` added in order (``recorder.AddWarning``), as the fake API
    emulates it (``admit.testing.fake_kube.admission.warning_headers``: duplicates once; whole while the runes written
    stay within ``truncateAtTotalRunes``; once a text would pass it, every text cut to ``truncateItemRunes`` and, once
    the sum reaches the total, the rest dropped), each taken out of its ``299 - "..."`` header."""
    return [h[len('299 - "'):-1].replace('\\"', '"').replace('\\\\', '\\') for h in warning_headers(texts)]


def test_the_emulated_recorder_cuts_as_kube_apiservers_own_test_does() -> None:
    """warning_test.go TestTruncation's first steps, at 4,096/256 instead of 25/5: whole below the total, every one
    cut once the total is passed."""
    short = ["a" * 1000, "b" * 1000, "c" * 1000]
    assert kube_apiserver_warnings(short) == short
    cut = kube_apiserver_warnings(short + ["d" * 1200])
    assert cut == ["a" * 256, "b" * 256, "c" * 256, "d" * 256]


def _warnings(case: Case) -> list[str]:
    config = config_from_args(build_parser().parse_args(["review", "-", *case.flags]))
    docs = [(f"{case.name}#{i}", d) for i, d in enumerate(case.documents())]
    results = asyncio.run(review_documents(docs, config))
    return [w for r in results for w in r["warnings"]]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_every_warning_leads_with_its_fix_and_keeps_it_behind_other_plugins_warnings(case: Case) -> None:
    warnings = _warnings(case)
    with_fix = [w for w in warnings if case.fix in w]
    assert with_fix, f"{case.name} ({case.source}) no longer gives its warning; it gave {warnings}"
    for w in warnings:
        assert len(w) <= WARNING_ITEM_RUNES, f"{case.name}: {len(w)} characters: {w}"
    for w in with_fix:
        assert w.index(case.fix) + len(case.fix) <= FIX_WITHIN, f"{case.name}: the fix comes late: {w}"
        seen = kube_apiserver_warnings(OTHERS + [w])
        assert sum(map(len, OTHERS)) > TRUNCATE_AT_TOTAL_RUNES - 256 and case.fix in seen[-1]


def test_admits_own_answer_never_carries_more_than_kube_apiserver_keeps() -> None:
    """Forty long warnings (a user's 300-character value quoted, a control character in it): the answer cuts each
    to 256 runes, makes the control character a space (kube-apiserver drops a warning holding one), and keeps to half
    of 4,096 runes with a last line that says how many more there are; what it sends passes kube-apiserver's recorder
    unchanged, and so do the /mutate and /validate answers of one request together."""
    texts = [f"set spec.x to {i}: " + "é\n" * 150 for i in range(40)]
    answer = review_response("admission.k8s.io/v1", "u", Decision(warnings=texts))["response"]["warnings"]
    assert all(len(w) <= WARNING_ITEM_RUNES and "\n" not in w for w in answer)
    assert sum(map(len, answer)) <= ANSWER_WARNING_RUNES == WARNING_TOTAL_RUNES // 2
    assert answer[0].startswith("set spec.x to 0: ") and answer[-1].endswith("run admit review -v on this object to "
                                                                            "read them all")
    assert int(answer[-1].split()[0]) == 40 - (len(answer) - 1)
    validate = review_response("admission.k8s.io/v1", "u", Decision(warnings=[t.upper() for t in texts]))
    both = answer + validate["response"]["warnings"]
    assert kube_apiserver_warnings(both) == list(dict.fromkeys(both))


def test_the_longest_warning_of_the_corpus_fits_and_is_reported(capsys: Any) -> None:
    """The figure the issue asks for (the longest warning admit gives over the corpus), printed with -s."""
    longest = max((w for case in CASES for w in _warnings(case)), key=len)
    print(f"longest warning: {len(longest)} characters: {longest}")
    assert len(longest) <= WARNING_ITEM_RUNES
