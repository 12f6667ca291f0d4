"""uvicorn's httptools protocol with a bound on the request head and JSON for the errors it answers itself.

llhttp, the parser under httptools, has no limit on the request line and headers: a 20 MB header was read whole into
memory and answered 200, so a few clients could fill the server's memory before the app saw a request. Here a head
of more than MAX_HEAD_BYTES gets 431 and the connection is closed. Two lower bounds of the head's size are checked,
so that neither can refuse a head within the limit: the URL and headers the parser hands over (exact, once each
header is whole), and the bytes of reads that were all head (a head still arriving, which the parser is buffering;
a read in which another message ended is left out of it, so what is buffered past the limit is one read at most).

Nor does uvicorn bound the time a head takes: a client that opened a connection, or began a head, and then sent a
byte a minute held a descriptor (and a slot of the file-descriptor limit) for as long as it liked. Here the head must
be whole within `head_timeout_s` of the connection's opening or of its first byte (nginx's client_header_timeout): a
connection that sent part of a head then gets 408 and is closed, one that sent nothing is closed. A body is held to
the same time between two of its reads (nginx's client_body_timeout): a client that stops sending one, or sends a
byte a minute, gets 408 and is closed, and the request it began sees the client gone (a body the app has not read
yet, which holds its reading back, is not the client's delay). Between requests on a kept-alive connection uvicorn's
keep-alive timeout (5 s) applies, as before.
"""

from __future__ import annotations

import asyncio
import json

from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

MAX_HEAD_BYTES = 64 * 1024  # the request line and headers; nginx's large_client_header_buffers holds 32 KB


class HttpProtocol(HttpToolsProtocol):
    """HTTP/1.1 over httptools, as uvicorn serves it, with the request head bounded."""

    def __init__(self, *args, head_timeout_s: float = 60.0, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.head_timeout_s = head_timeout_s
        self.head_timer: asyncio.TimerHandle | None = None  # while a head is awaited: closes the connection at its end
        self.in_head = False  # between the first byte of a head and its end
        self.parsed = 0  # bytes of this head the parser has handed over (URL, header names and values)
        self.unparsed = 0  # bytes of the reads since this head began that were all head
        self.in_body = False  # between the end of a head and the end of its message
        self.body_timer: asyncio.TimerHandle | None = None  # while a body is awaited: its time since its last read
        self.heads = 0  # heads read on this connection
        self.too_large = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._await_head()

    def connection_lost(self, exc: Exception | None) -> None:
        self._head_done()
        self._body_done()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.body_timer is not None:  # a read of the body: its clock starts again
            self._await_body()
        all_head, heads = not self.in_body, self.heads
        super().data_received(data)  # answers a parser error with send_400_response
        if all_head and self.heads == heads and not self.transport.is_closing():
            self.unparsed += len(data)  # no head ended in this read: all of it is (still) head
            if self.unparsed > MAX_HEAD_BYTES:
                self.too_large = True
                self.send_400_response("")

    def on_message_begin(self) -> None:
        self.parsed = self.unparsed = 0
        self.in_head = True
        self._await_head()
        super().on_message_begin()

    def on_url(self, url: bytes) -> None:
        self._count(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count(len(name) + len(value) + 4)  # ": " and CRLF
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self.in_body, self.in_head, self.heads = True, False, self.heads + 1
        self._head_done()
        self._await_body()
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self.in_body = False
        self._body_done()
        super().on_message_complete()

    def _count(self, n: int) -> None:
        self.parsed += n
        if self.parsed > MAX_HEAD_BYTES:
            self.too_large = True
            raise ValueError("request head too large")  # the parser stops; uvicorn calls send_400_response

    def _await_head(self) -> None:
        """Start the head's clock, unless it runs already (a first head is timed from the connection's opening)."""
        if self.head_timer is None:
            self.head_timer = self.loop.call_later(self.head_timeout_s, self._head_timed_out)

    def _head_done(self) -> None:
        if self.head_timer is not None:
            self.head_timer.cancel()
            self.head_timer = None

    def _await_body(self) -> None:
        self._body_done()
        self.body_timer = self.loop.call_later(self.head_timeout_s, self._body_timed_out)

    def _body_done(self) -> None:
        if self.body_timer is not None:
            self.body_timer.cancel()
            self.body_timer = None

    def _body_timed_out(self) -> None:
        self.body_timer = None
        if self.transport.is_closing() or not self.in_body:
            return
        if self.flow.read_paused:  # the app has not read what came: the wait is its own
            self._await_body()
            return
        message = (
            f"the request's body stopped arriving: nothing of it came for {self.head_timeout_s:g} s; the limit is "
            f"{self.head_timeout_s:g} s between two reads of it (NMT_HEAD_TIMEOUT_S)"
        )
        self._send_error(408, "request_timeout", message)

    def _head_timed_out(self) -> None:
        self.head_timer = None
        if self.transport.is_closing():
            return
        if not self.in_head:  # nothing of a head came: nothing to answer
            self.transport.close()
            return
        message = (
            f"the request line and headers did not arrive within {self.head_timeout_s:g} s of the connection's "
            f"opening or of their first byte; the limit is {self.head_timeout_s:g} s (NMT_HEAD_TIMEOUT_S)"
        )
        self._send_error(408, "request_timeout", message)

    def send_400_response(self, msg: str) -> None:
        """The answer to bytes that are not an HTTP/1.1 request (or a head over the limit): JSON, then close."""
        if self.too_large:
            status, kind = 431, "headers_too_large"
            message = (
                f"the request line and headers have more than {MAX_HEAD_BYTES} bytes; the limit is {MAX_HEAD_BYTES}"
            )
        else:
            status, kind = 400, "bad_request"
            message = (
                "the request is not valid HTTP/1.1, so the connection is closed: a request line, headers, then a body "
                "framed by Content-Length or Transfer-Encoding: chunked (a body with neither is read as the next request)"
            )
        self._send_error(status, kind, message)

    def _send_error(self, status: int, kind: str, message: str) -> None:
        """A JSON error, then the connection closed."""
        self._head_done()
        self._body_done()
        body = json.dumps({"error": message, "type": kind}).encode()
        head = [STATUS_LINE[status]]
        head += [name + b": " + value + b"\r\n" for name, value in self.server_state.default_headers]
        head += [b"content-type: application/json\r\n", b"content-length: %d\r\n" % len(body), b"connection: close\r\n"]
        self.transport.write(b"".join(head) + b"\r\n" + body)
        self.transport.close()
