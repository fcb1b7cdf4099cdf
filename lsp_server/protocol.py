"""JSON-RPC that answers every request: message framing and dispatch in front of pygls.

pygls 2.1 drops a request whose params fail to deserialize (the exception is only logged), never
resynchronises after a ``Content-Length`` that does not match the body, ignores batches, messages
whose ``method`` is not a string and notifications sent with an id, and turns malformed input into a
generic "Error in server" pop-up. An editor then waits forever for the answer. This module fixes it
where pygls dispatches (the LSP base protocol, JSON-RPC 2.0 section 5):

- :func:`read_frames` reads ``Content-Length`` framed bodies and resynchronises on the next header
  when a length is too short or too long (a too-long body that swallowed later messages gives them
  back).
- :class:`FastcoderProtocol` validates each message before pygls structures it and answers every
  message that carries an id: ``-32700`` ParseError (id null) for invalid JSON, ``-32600``
  InvalidRequest for a message that is not a request (bad ``jsonrpc``, ``method`` or ``id``, a request
  after ``shutdown``, a second ``initialize``; a second ``initialized`` is ignored), ``-32602`` InvalidParams naming the fields that failed, ``-32601``
  MethodNotFound for an unknown request (pygls), ``-32603`` InternalError when a handler raises
  (pygls). Unknown notifications are ignored (``$/`` ones silently). A batch is dispatched element
  by element (LSP clients expect no array responses). A notification sent with an id is applied and
  answered with ``null``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from typing import Any, AsyncIterator, Awaitable, Callable

import cattrs
from lsprotocol import types
from pygls.protocol import LanguageServerProtocol

log = logging.getLogger("fastcoder.lsp.protocol")

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602

#: A header line that starts a message; searched (not matched) so garbage before it is skipped.
_CONTENT_LENGTH = re.compile(rb"Content-Length:[ \t]*(\d+)[ \t]*\r?\n?$", re.IGNORECASE)
#: A whole header block inside a body that swallowed the next message(s).
_EMBEDDED_HEADER = re.compile(rb"Content-Length:[ \t]*(\d+)[ \t]*\r\n(?:[^\r\n]*\r\n)*?\r\n", re.IGNORECASE)
#: Bodies larger than this (bytes) are refused: the reader skips them instead of holding them.
MAX_BODY_BYTES = 64 * 1024 * 1024


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def describe_params_error(exc: BaseException) -> str:
    """One line naming the fields of a request's params that failed to deserialize.

    Args:
        exc: the exception pygls raised while structuring the message (its ``__cause__`` is
            cattrs' ``ClassValidationError`` when fields failed).
    Returns:
        e.g. ``"invalid params: params.position: invalid value; params.context.triggerKind: invalid
        value for type, expected InlineCompletionTriggerKind"``.
    """
    cause = exc.__cause__ or exc
    try:
        parts = cattrs.transform_error(cause, path="$")
    except Exception:  # not a cattrs error: say what it was
        return f"invalid params: {cause}"
    out = []
    for part in parts:
        text, _, path = part.rpartition(" @ ")
        path = ".".join(_camel(seg) for seg in path.removeprefix("$.").split("."))
        out.append(f"{path}: {text}" if text else part)
    return "invalid params: " + "; ".join(out) if out else "invalid params"


def _valid_id(value: Any) -> bool:
    return isinstance(value, (str, int)) and not isinstance(value, bool)


def _notification_methods() -> frozenset[str]:
    return frozenset(method for method, (msg_type, *_rest) in types.METHOD_TO_TYPES.items()
                     if msg_type is not None and "id" not in {a.name for a in msg_type.__attrs_attrs__})


NOTIFICATION_METHODS = _notification_methods()


class FastcoderProtocol(LanguageServerProtocol):
    """pygls' LSP protocol with a response for every request (see the module docstring).

    Feed it raw message bodies with :meth:`receive_body` (as :func:`serve` does); pygls' own
    handlers then run unchanged. ``exit_code`` is what the process should exit with after ``exit``
    (0 after ``shutdown``, else 1, as LSP specifies).
    """

    exit_code = 1

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._lifecycle_seen: set[str] = set()  # "initialize" / "initialized" received

    # ---- answers
    def reply_error(self, msg_id: Any, code: int, message: str) -> None:
        """Send a JSON-RPC error response (``msg_id`` None is sent as ``"id": null``)."""
        self._send_data({"jsonrpc": "2.0", "id": msg_id if _valid_id(msg_id) else None,
                         "error": {"code": code, "message": message}})

    # ---- input
    def receive_body(self, body: bytes) -> None:
        """Handle one framed message body (bytes): parse, validate, dispatch; never raises."""
        try:
            obj = json.loads(body)
        except (ValueError, UnicodeDecodeError) as exc:
            log.warning("unparsable message (%d bytes): %s", len(body), exc)
            self.reply_error(None, PARSE_ERROR, f"parse error: {exc}")
            return
        if isinstance(obj, list):
            if not obj:
                self.reply_error(None, INVALID_REQUEST, "invalid request: empty batch")
            for item in obj:
                self._receive_one(item)
            return
        self._receive_one(obj)

    def _receive_one(self, obj: Any) -> None:
        try:
            self._dispatch(obj)
        except Exception as exc:  # a bug here must not lose the request
            log.exception("dispatch failed")
            if isinstance(obj, dict) and "method" in obj and "id" in obj:
                self.reply_error(obj.get("id"), -32603, f"internal error: {exc}")

    def _dispatch(self, obj: Any) -> None:
        if not isinstance(obj, dict):
            self.reply_error(None, INVALID_REQUEST, "invalid request: a message must be a JSON object")
            return
        has_id, msg_id = "id" in obj, obj.get("id")
        if "method" not in obj:  # a response to one of our requests
            if has_id and _valid_id(msg_id) and ("result" in obj or "error" in obj) and obj.get("jsonrpc") == "2.0":
                self._handle_structured(obj)
            else:
                log.warning("dropped a message that is neither a request, a notification nor a response")
            return
        method = obj["method"]
        if not isinstance(method, str):
            if has_id:
                self.reply_error(msg_id, INVALID_REQUEST, "invalid request: 'method' must be a string")
            return
        if has_id and not _valid_id(msg_id):
            self.reply_error(None, INVALID_REQUEST, "invalid request: 'id' must be a string or an integer")
            return
        if obj.get("jsonrpc") != "2.0":
            if has_id:
                self.reply_error(msg_id, INVALID_REQUEST, "invalid request: 'jsonrpc' must be \"2.0\"")
            return
        if method in (types.INITIALIZE, types.INITIALIZED):  # once per session (LSP); a repeat would reset it
            if method in self._lifecycle_seen:
                if has_id:
                    self.reply_error(msg_id, INVALID_REQUEST, f"invalid request: {method} was already received")
                else:
                    log.warning("ignored a repeated %s", method)
                return
            if method == types.INITIALIZE or types.INITIALIZE in self._lifecycle_seen:
                self._lifecycle_seen.add(method)
        if method == types.EXIT:
            self.exit_code = 0 if self._shutdown else 1
        elif self._shutdown:
            if has_id:
                self.reply_error(msg_id, INVALID_REQUEST, f"invalid request: {method} after shutdown")
            return
        known = method in self.fm.builtin_features or method in self.fm.features or method == types.CANCEL_REQUEST
        if not known:
            if has_id:
                self.reply_error(msg_id, METHOD_NOT_FOUND, f"method not found: {method}")
            else:
                (log.debug if method.startswith("$/") else log.info)("ignored unknown notification %s", method)
            return
        try:
            message = self._structure_call(obj, method, has_id)
        except Exception as exc:
            if has_id:
                self.reply_error(msg_id, INVALID_PARAMS, describe_params_error(exc))
            else:
                log.warning("dropped %s: %s", method, describe_params_error(exc))
            return
        if has_id and method in NOTIFICATION_METHODS:
            # a notification sent as a request: apply it, and answer so the client does not wait
            self.handle_message(message)
            self._send_data({"jsonrpc": "2.0", "id": msg_id, "result": None})
            return
        self.handle_message(message)

    def _structure_call(self, obj: dict, method: str, has_id: bool) -> Any:
        """The typed request/notification for ``obj`` (params default to null, as LSP allows);
        raises cattrs' errors for params that do not fit the method's type."""
        from pygls.protocol.json_rpc import JsonRPCNotification, JsonRPCRequestMessage  # noqa: PLC0415

        if "params" not in obj:
            obj = {**obj, "params": None}
        msg_type = self.get_message_type(method)
        if msg_type is None:
            msg_type = JsonRPCRequestMessage if has_id else JsonRPCNotification
        elif has_id and method in NOTIFICATION_METHODS:
            obj = {k: v for k, v in obj.items() if k != "id"}
        return self._converter.structure(obj, msg_type)

    def _handle_structured(self, obj: dict) -> None:
        try:
            message = LanguageServerProtocol.structure_message(self, obj)
        except Exception as exc:
            log.warning("dropped an invalid response: %s", exc)
            return
        self.handle_message(message)


async def read_frames(readline: Callable[[], Awaitable[bytes]],
                      readexactly: Callable[[int], Awaitable[bytes]]) -> AsyncIterator[bytes]:
    """Yield the bodies of ``Content-Length`` framed messages until end of input.

    Resynchronises instead of going deaf: a header is found anywhere at the end of a line (bytes of
    a body cut short by a too-small length are skipped), and when a body read with a too-large length
    contains whole framed messages after a complete JSON value, those are yielded too.

    Args:
        readline: returns the next line (bytes, with its newline), b"" at end of input.
        readexactly: returns up to n bytes (fewer only at end of input).
    """
    length: int | None = None
    while True:
        line = await readline()
        if not line:
            return
        match = _CONTENT_LENGTH.search(line)
        if match:
            if match.start() > 0:
                log.warning("resynchronised: skipped %d bytes before a header", match.start())
            length = int(match.group(1))
            continue
        if line.strip():
            continue  # another header (Content-Type) or stray bytes
        if length is None:
            continue
        size, length = length, None
        if size > MAX_BODY_BYTES:
            log.warning("skipped a %d-byte message (limit %d)", size, MAX_BODY_BYTES)
            while size > 0:
                chunk = await readexactly(min(size, 1 << 20))
                if not chunk:
                    return
                size -= len(chunk)
            continue
        body = await readexactly(size)
        if len(body) < size:
            return
        parts, missing = split_swallowed(body)
        if missing:  # the last swallowed message continues in the stream
            rest = await readexactly(missing)
            parts[-1] += rest
        for part in parts:
            yield part


def split_swallowed(body: bytes) -> tuple[list[bytes], int]:
    """Split a body that a too-large ``Content-Length`` made swallow the next message(s).

    Returns:
        ``(parts, missing)``: the body alone when it parses (or holds no header), else the JSON
        value before the first embedded header and each embedded message; ``missing`` is how many
        bytes (>= 0) of the last embedded message are still in the stream.
    """
    try:
        json.loads(body)
        return [body], 0
    except ValueError:
        pass
    headers = list(_EMBEDDED_HEADER.finditer(body))
    if not headers:
        return [body], 0
    parts = [body[:headers[0].start()]]
    missing = 0
    for header in headers:
        start, size = header.end(), int(header.group(1))
        parts.append(body[start:start + size])
        missing = max(0, start + size - len(body))
    return parts, missing


async def serve(protocol: FastcoderProtocol, reader: Any, stop: Any) -> None:
    """The message loop: frames from ``reader`` (pygls' StdinAsyncReader or an asyncio StreamReader)
    into :meth:`FastcoderProtocol.receive_body`, until end of input or ``stop`` (threading.Event)."""
    async for body in read_frames(reader.readline, reader.readexactly):
        if stop.is_set():
            break
        protocol.receive_body(body)
        await asyncio.sleep(0)  # let handlers scheduled by this message start
