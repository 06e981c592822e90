"""Serving certificates: X.509 helpers (``certs``), certificates from files reloaded on change (``provider``), and
the self-managed CA in a Secret with ``caBundle`` kept in the webhook configurations (``selfcerts``).
"""
