"""Operator emulations for the fake API, each written from its operator's source: the objects the operator makes
from a user's object (names, labels, annotations, ownerReferences, templates, in its creation order, every write
through the fake's admission chain) and the operator's own admission webhooks as in-process callables in that chain.
Each module names the upstream files, functions and versions it follows; docs/fake-api.md lists them.

Written from the operators' code, never from admit's: a module here imports the fake API and this package only
(``tests/test_architecture.py`` checks it), so an emulation can disagree with admit. Test code, not in admit's
wheel. The fake API (``admit.testing.fake_kube``) never imports this package: an emulation is a ``kit.Controller``
added with ``FakeKubeAPI.add_controller`` plus webhooks added with ``AdmissionChain.add``. kube-controller-manager's
Deployment, Job and StatefulSet controllers are here too (``kcm.py``, ``FakeControlPlane``): nothing admit ships runs
them.
"""
