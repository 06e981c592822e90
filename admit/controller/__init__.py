"""The loops inside ``admit serve`` that finish what admission starts once a workload is stored: adopt its PodGroup,
keep it in step, clean up orphans (``podgroups``: lifecycle, indexes, leadership; ``writes``: the guarded writes of
one key), and the same for the workload-api backend's Workload and PodGroup (``workload_api``); what they watch and
the small records their caches keep (``claims``), the view admission reads (``cacheview``), Events (``events``), the
Lease (``leader``), the work queue and indexes (``workqueue``, ``multiindex``). The pure decisions they run live with
their backend (``admit.backends.*.reconcile``).
"""
