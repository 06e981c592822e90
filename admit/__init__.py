"""admit: a Kubernetes admission webhook for gang scheduling with the Coscheduling plugin.

See README.md and docs/behaviour.md for the user-facing annotations and ``admit/`` module docstrings for the rules each module follows.
"""

__version__ = "0.1.0"
