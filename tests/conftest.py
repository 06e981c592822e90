"""Test session set-up.

``ADMIT_TEST_PLAIN_INSTALL=1`` runs the tests as a plain ``pip install .`` would (no ``fast`` extra): orjson and
uvloop cannot be imported, so admit takes the stdlib JSON backend and the asyncio loop (``tests/test_fuzz.py`` runs
itself again that way).
"""

import os
import sys

if os.environ.get("ADMIT_TEST_PLAIN_INSTALL") == "1":
    sys.modules["orjson"] = None  # type: ignore[assignment]  # import orjson raises ImportError
    sys.modules["uvloop"] = None  # type: ignore[assignment]
    os.environ["ADMIT_EVENT_LOOP"] = "asyncio"
