"""Prometheus metrics (``metrics``) and logging setup, text or JSON (``logs``). Logger names stay
``admit.<old module>`` strings (``admit.controller``, ``admit.watchcache`` ...) so users' log filters keep working.
"""
