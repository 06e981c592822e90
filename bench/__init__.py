"""admit's benchmarks: run from the root of a checkout as ``python -m bench.<script>`` (docs/performance.md).

The scripts, each a thin command over the shared modules:

- ``admit_bench``: the admission hot path against the fastest aiohttp HTTPS handler and a Go webhook (``--quick``;
  CPU per request, the RSS floor of admit's dependencies), idle connections
  (``--idle-connections N``, in ``idle_connections``) and the controller at scale (``--gang-workloads``, in
  ``gang_scale``);
- ``apiserver_bench``: the cost per pod through a real kube-apiserver;
- ``restart_bench``: rolling restarts under continuous webhook calls;
- ``repeat_suite``: the test suite N times with one core kept busy, failures per test;
- ``handler_profile``: the CPU each layer of admit's request costs, in-process (aiohttp, body read, JSON, checks,
  decision, metrics, answer; admit serve's handler before and now).

The shared modules: ``processes`` (the servers under test, the fake API, certificates, ``/proc`` and ``/metrics``),
``driver`` (the keep-alive load generator), ``baseline`` (the floor server, ``python -m bench.baseline``), ``peers``
(the Go webhook of ``gowebhook/``, built when a Go toolchain is present, and the import floor) and
``reviews`` (AdmissionReviews as kube-apiserver sends them). Imports go one way: a script imports shared modules
(and ``admit_bench`` its two mode modules), a shared module never imports a script, and nothing edits ``sys.path``
(tests/release/test_bench.py checks both). ``restart_bench`` and ``apiserver_bench --plane`` also use the test support
code of ``tests/support/`` (the balancer, the webhook client, the real-plane launcher), which is not part of the wheel.
"""
