"""aiohttp's request handler with a fast path for the common AdmissionReview: what ``admit serve`` runs.

aiohttp's low-level server (``aiohttp.web.Server``) parses each request with its C parser (llhttp), then builds a
``BaseRequest``, a ``StreamWriter``, a task per request and a ``Response`` whose headers it assembles: about 20 us of
CPU per request on the development machine, as much as admit's whole decision (docs/performance.md). For the request
kube-apiserver sends almost always -- ``POST /mutate`` or ``/validate``, HTTP/1.1 keep-alive, ``Content-Type:
application/json``, the whole body arrived in one read, within ``--max-body-bytes`` -- :class:`FastRequestHandler`
answers inline, in ``data_received``, after the same C parser has parsed the request: the same decision, metrics
and answer bytes (status line, ``Content-Type``, ``Content-Length``, ``Date``, ``Server``, body), without those
objects. Everything else goes the way aiohttp's ``RequestHandler`` takes it, unchanged: a body still arriving (the
read deadline), any other path or method, ``Connection: close``, HTTP/1.0, a body over the limit or not an
AdmissionReview (the 400s), a decision that waits on the API, a server shutting down (``Connection: close``
answers), pipelined requests.

The answer is written once the loop has handled the batch of reads it came in (:meth:`FastServer.flush`, one
``call_soon`` per batch, not per request), as aiohttp's own path writes from its handler task after the reads:
writing inside ``data_received`` wakes the client in the middle of the batch, and on a loopback or a busy machine the
kernel then switches to it before the server has read the rest (measured end to end with 16 connections on the
development machine: 0.68 against 0.41 context switches per request, 95 against 63 us of CPU per request). An answer
still waiting is written before anything else on its connection: before the next request's bytes are handled and
before aiohttp closes the connection (``close``, ``force_close``: shutdown, the keep-alive timeout).

The fast path reads a few of aiohttp's ``RequestHandler`` internals (the message queue, the idle waiter, the
keep-alive deadline); :data:`SUPPORTED` is False, and ``admit serve`` keeps aiohttp's own handler, when the installed
aiohttp lacks any of them.
"""

from __future__ import annotations

from typing import Any, Callable

from aiohttp import web
from aiohttp.helpers import rfc822_formatted_time
from aiohttp.http import SERVER_SOFTWARE, HttpVersion11
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestHandler

__all__ = ["FastRequestHandler", "FastServer", "SUPPORTED", "FastAnswer"]

FastAnswer = Callable[[Any, Any], "bytes | None"]
"""``answer(message, body) -> body bytes | None``: the AdmissionReview answer for an aiohttp ``RawRequestMessage``
and its whole body, or ``None`` to leave the request to aiohttp's normal path."""

_INTERNALS = ("_messages", "_waiter", "_parser", "_payload_parser", "_upgraded", "_force_close", "_close",
              "_buffer_paused", "_request_count", "_keepalive_timeout", "_next_keepalive_close_time",
              "_keepalive_handle", "_process_keepalive", "_manager")
SUPPORTED = all(any(name in getattr(k, "__slots__", ()) or name in vars(k) for k in RequestHandler.__mro__)
                for name in (*_INTERNALS, "_pause_reading_for_buffer", "_message_tail", "_max_msg_queue_size"))
"""The installed aiohttp's ``RequestHandler`` has what the fast path reads."""

_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\nDate: %s\r\nServer: %s\r\n\r\n"
_SERVER = SERVER_SOFTWARE.encode()


class FastRequestHandler(RequestHandler):
    """aiohttp's ``RequestHandler`` that answers a complete, idle-connection AdmissionReview inline (module
    docstring). ``fast`` answers or declines; ``on_answer`` (set by ``connections.ConnectionGuard``) is called after
    each inline answer, as its ``handle`` marks the end of a request."""

    __slots__ = ("fast", "on_answer", "out")

    def __init__(self, manager: "FastServer", fast: FastAnswer, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self.fast = fast
        self.on_answer: Callable[[], None] | None = None
        self.out: bytes | None = None  # an inline answer not written yet (module docstring)

    def data_received(self, data: bytes) -> None:
        if self.out is not None:  # the answer before anything these bytes make
            self.flush()
        parser = self._parser
        if (parser is None or self._force_close or self._close or self._payload_parser is not None or self._upgraded
                or self._messages or self._waiter is None or self._buffer_paused):
            super().data_received(data)  # busy, closing or mid-body: aiohttp's own path
            return
        try:
            messages, upgraded, tail = parser.feed_data(data)
        except HttpProcessingError:
            # aiohttp's path answers the 400; its parser has failed for good, so it fails the same way again
            super().data_received(data)
            return
        if len(messages) == 1 and not upgraded:
            message, payload = messages[0]
            answer = self._answer(message, payload)
            if answer is not None:
                self._request_count += 1
                self._manager.requests_count += 1  # type: ignore[union-attr]
                consumed = getattr(parser, "message_consumed", None)
                if consumed is not None:
                    consumed()
                # the Date aiohttp's own answers carry (formatted once per second)
                self.out = _HEAD % (len(answer), rfc822_formatted_time().encode(), _SERVER) + answer
                server: FastServer = self._manager  # type: ignore[assignment]
                loop = self._loop
                if not server.unwritten:
                    loop.call_soon(server.flush)
                server.unwritten.append(self)
                close_time = loop.time() + self._keepalive_timeout
                self._next_keepalive_close_time = close_time
                if self._keepalive_handle is None and self._keepalive_timeout > 0:
                    self._keepalive_handle = loop.call_at(close_time, self._process_keepalive)
                if self.on_answer is not None:
                    self.on_answer()
                return
        self._queue(messages, upgraded, tail)

    def flush(self) -> None:
        """Write the inline answer still waiting, if any, unless the connection is closing."""
        out, self.out = self.out, None
        transport = self.transport
        if out is not None and transport is not None and not transport.is_closing():
            transport.write(out)

    def close(self) -> None:
        self.flush()
        super().close()

    def force_close(self) -> None:
        self.flush()
        super().force_close()

    def _answer(self, message: Any, payload: Any) -> bytes | None:
        if (message.method != "POST" or message.version != HttpVersion11 or message.should_close
                or message.chunked or message.upgrade or not payload.is_eof()):
            return None
        buffer = getattr(payload, "_buffer", None)
        if buffer is None:
            return None
        body = buffer[0] if len(buffer) == 1 else b"".join(buffer)
        return self.fast(message, body)

    def _queue(self, messages: Any, upgraded: bool, tail: bytes) -> None:
        """What aiohttp's ``RequestHandler.data_received`` does with what its parser returned."""
        for msg, payload in messages:
            self._request_count += 1
            self._messages.append((msg, payload))
        waiter = self._waiter
        if messages and waiter is not None and not waiter.done():
            waiter.set_result(None)
        if not self._buffer_paused and len(self._messages) >= getattr(self, "_max_msg_queue_size", 32):
            self._pause_reading_for_buffer()
        self._upgraded = upgraded
        if upgraded and tail:
            self._message_tail = tail


class FastServer(web.Server):
    """aiohttp's low-level server whose connections are :class:`FastRequestHandler` s."""

    def __init__(self, handler: Any, fast: FastAnswer, **kwargs: Any) -> None:
        super().__init__(handler, **kwargs)
        self.fast = fast
        self.unwritten: list[FastRequestHandler] = []  # connections with an inline answer to write (flush)

    def __call__(self) -> RequestHandler:
        return FastRequestHandler(self, self.fast, loop=self._loop, **self._kwargs)

    def flush(self) -> None:
        """Write the inline answers of the batch of reads the loop has just handled (module docstring)."""
        handlers, self.unwritten = self.unwritten, []
        for handler in handlers:
            handler.flush()
