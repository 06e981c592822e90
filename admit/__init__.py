"""admit: a Kubernetes admission webhook for gang scheduling (scheduler-plugins Coscheduling PodGroups, and
Kubernetes' native Workload API).

One folder per concern over a ground floor (``config``, ``echo``, ``jsonio``, ``eventloop``); a module imports only
from the layers below its own (checked by ``lint-imports`` with the contracts in pyproject.toml).

``gang/``, ``families/``, the backends' pure modules, ``webhook.mutate`` and ``webhook.validate`` never import
aiohttp, kubernetes_asyncio or ``kube/``: they are objects in, decisions out. The layers, a Pod CREATE and a
Deployment CREATE followed through the code, and how to add a workload kind or a gang backend: docs/architecture.md.
User-facing behaviour: README.md and docs/.
"""

__version__ = "0.1.0"
