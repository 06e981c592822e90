"""The controller inside ``admit serve``, which finishes what admission starts once a workload is stored: adopt its
gang's objects, keep them in step, clean up orphans. ``manager.Manager`` (what every backend shares; it names no
backend) runs one ``gangs.GangController`` per enabled gang backend; docs/architecture.md lists the other modules.
"""
