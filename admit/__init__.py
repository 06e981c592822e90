"""admit: a Kubernetes admission webhook for gang scheduling (scheduler-plugins Coscheduling PodGroups, and
Kubernetes' native Workload API).

The tree, one folder per concern; a module imports only from the rows below its own (checked by ``lint-imports``
with the contracts in pyproject.toml):

==================  ===================================================================================================
``cli/``            one module per ``admit <verb>``: ``serve`` (process wiring), ``review``, ``status``, ``dev``; the
                    parser and ``main`` in ``cli/__init__.py``
``testing/``        the fake API (``fake_kube``) and its controllers: the kit ``admit serve --dev`` runs
``webhook/``        AdmissionReview, mutate, validate, rollout, the admission under one deadline, the aiohttp app
``controller/``     the loops that adopt, keep in step and clean up a gang's objects; their records, Lease, Events,
                    queue
``tls/``            certificates, reloaded files, the self-managed CA
``families/``       one module per workload family; ``families/kinds.py`` is the kind registry (``RESOLVERS``)
``backends/``       one folder per gang backend (``coscheduling/``, ``workload_api/``) behind ``interface.py``
                    ``GangBackend``, found by name (``registry.py``; API halves ``runtime.py``); ``check_plan`` (the
                    below-minMember refusal); ``admit status``'s reasons (each backend's ``diagnose``, run by its
                    status part; what they share in ``diagnose.py``)
``gang/``           the pure model: annotations -> ``GangPlan``; quantities, pod resources, patches,
                    ownerReferences
``kube/``           the only code that talks to kube-apiserver: the client and the list+watch cache
``observability/``  metrics and logs
ground floor        ``config``, ``echo``, ``jsonio``, ``eventloop``: imported by all, importing no folder
==================  ===================================================================================================

``gang/``, ``families/``, the backends' pure modules, ``webhook.mutate`` and ``webhook.validate`` never import
aiohttp, kubernetes_asyncio or ``kube/``: they are objects in, decisions out. The layers, a Pod CREATE and a
Deployment CREATE followed through the code, and how to add a workload kind or a gang backend: docs/architecture.md.
User-facing behaviour: README.md and docs/.
"""

__version__ = "0.1.0"
