"""The controller inside ``admit serve``, which finishes what admission starts once a workload is stored: adopt its
gang's objects, keep them in step, clean up orphans. ``manager`` (what every backend shares: settings, the Lease,
the workload and class caches, the claims index; it names no backend) runs one ``gangs.GangController`` per enabled
gang backend, the same class for every backend; ``claims`` (what it watches and the small records its caches keep),
``cacheview`` (the view admission reads), ``guards`` (the guards around every write), ``keyloop`` / ``workqueue``
(the work of one key), ``events``, ``leader``, ``multiindex``, ``settings``. The pure decision they run is
``admit.backends.gangobjects.decide_objects``, over the backend's interface.
"""
