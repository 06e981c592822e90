"""Prometheus metrics (``metrics``) and logging setup, text or JSON (``logs``). Logger names are fixed strings
(``admit.controller``, ``admit.watchcache`` ...), not module paths, so users' log filters keep working.
"""
