"""Bounded echoes of user input: what a denial, a warning or a log line may quote of a value the user sent.

An AdmissionReview body may be 3 MiB, and an annotation alone can be most of it. Quoting such a value in full made a
2.9 MB denial (kube-apiserver passes ``status.message`` on to the user and into its own logs) and a 2.9 MB log line.
Every message that quotes a user's value goes through :func:`clip`, and every whole message through
:func:`clip_message` before it leaves admit.
"""

from __future__ import annotations

import json
import reprlib
from typing import Any

__all__ = ["clip", "clip_message", "MAX_ECHO_CHARS", "MAX_MESSAGE_CHARS"]

MAX_ECHO_CHARS = 80
"""Characters of one quoted value (its ``repr``) kept in a message."""

MAX_MESSAGE_CHARS = 2048
"""Characters of a whole ``status.message`` or log message (several clipped values plus the explanation fit)."""

_REPR = reprlib.Repr()
_REPR.maxlevel = 2
_REPR.maxstring = MAX_ECHO_CHARS
_REPR.maxother = MAX_ECHO_CHARS
_REPR.maxlist = _REPR.maxdict = _REPR.maxtuple = _REPR.maxset = 4


def clip(value: Any, limit: int = MAX_ECHO_CHARS) -> str:
    """``repr(value)`` in at most about ``limit`` characters, whatever the value's size or depth.

    A long string keeps its start and says its length (``'xxxx'... (2900000 chars)``); lists and dicts are cut by
    :mod:`reprlib` (a few items, two levels deep), so no ``repr`` of a huge or deeply nested value is ever built.
    """
    if isinstance(value, str):  # double-quoted as in a manifest: annotation="3"
        if len(value) <= limit:
            return json.dumps(value, ensure_ascii=False)
        return f"{json.dumps(value[:limit], ensure_ascii=False)}... ({len(value)} chars)"
    text = _REPR.repr(value)
    return text if len(text) <= 2 * limit else f"{text[: 2 * limit]}..."


def clip_message(message: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """``message`` cut to ``limit`` characters (with ``... (N chars)`` said) when longer."""
    if len(message) <= limit:
        return message
    return f"{message[:limit]}... ({len(message)} chars)"
