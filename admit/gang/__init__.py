"""The pure gang model: a workload's annotations in, a :class:`plan.GangPlan` out, with the quantities, pod
resources, JSON Patch pointers, ownerReferences, children and the objects that are going away it is computed from.
No asyncio, no aiohttp, no kubernetes_asyncio (the import contracts in pyproject.toml check it).
"""
