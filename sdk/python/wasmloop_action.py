"""An action as one function: this module runs the ActionLoop protocol around it.

    import sys
    from wasmloop_action import action

    def main(args, ctx):
        name = args.get("name", "Stranger")
        print(f"greeting {name}", file=sys.stderr)
        return {"message": f"Hello, {name}!"}

    Run = action(main)

`main(args, ctx)` gets the request's `value` (a dict; `{}` when the request has none) and
the activation's `Context`, and returns the result: a dict (or a list), written as one
line of JSON. `Run` is the class componentize-py calls for the `wasi:cli/run` export: it
looks for it in the app module, so `Run = action(main)` must be in the module given to
`componentize-py ... componentize <module>`.

- An exception answers `{"error": "<ExceptionType>: <message>"}` and goes to the logs
  with its traceback; the instance goes on serving.
- A result that is not a dict or a list, or that JSON cannot hold (a set, NaN, ...),
  answers `{"error": ...}` saying what it was.
- stdout carries the results, so while the loop runs `sys.stdout` is stderr: a plain
  `print()` reaches the logs instead of passing for an answer. Log to stderr all the
  same, where a reader of the code sees that it is a log.

`fetch(url, method=..., headers=..., body=...)` sends an HTTP request through wasi:http
and returns a `Response` (`status`, `headers`, `body`, `text()`, `json()`); the host must
be in the runtime's `--allow-outbound` list. `urllib.request` works as well (over
wasi:sockets, under the same list).

`serve(main)` runs the same loop without componentize-py, in any Python reading requests
on stdin (for trying `main` with plain `python3`).
"""

# Imported while the component is built, so that it is in it: socket and urllib encode
# each host name with this codec, and componentize-py keeps only the modules imported at
# build time (without it: "LookupError: unknown encoding: idna" at the first request).
import encodings.idna  # noqa: F401
import json
import os
import sys
import time
import traceback
from urllib.parse import urlsplit

try:  # wasi:http, in a component built for the template's world (wit/)
    from componentize_py_types import Err as _Err
    from wit_world.imports import outgoing_handler as _outgoing_handler
    from wit_world.imports import poll as _poll
    from wit_world.imports import streams as _streams
    from wit_world.imports import wasi_http_types as _http
except ImportError:  # plain Python, or a world without wasi:http: fetch says so
    _http = None

__all__ = ["Context", "FetchError", "Response", "action", "fetch", "serve"]


class Context:
    """The activation's context, from its request line: never from the environment, which
    an instance serving several activations holds from another one (or not at all).
    `api_host` is from the environment: it is the same for every activation of a
    container."""

    # The fields are read from the request line when asked for: most actions ask for
    # none, and each attribute set costs an activation time in an interpreter.
    __slots__ = ("_request", "api_host", "_arrived")

    def __init__(self, request, api_host=""):
        self._request = request
        self.api_host = api_host
        # A deadline already past as the request came is no limit (below).
        self._arrived = time.time() if "deadline" in request else None

    @property
    def activation_id(self):
        return _text(self._request.get("activation_id"))

    @property
    def transaction_id(self):
        return _text(self._request.get("transaction_id"))

    @property
    def action_name(self):
        return _text(self._request.get("action_name"))

    @property
    def action_version(self):
        return _text(self._request.get("action_version"))

    @property
    def namespace(self):
        return _text(self._request.get("namespace"))

    @property
    def api_key(self):
        return _text(self._request.get("api_key"))

    @property
    def deadline(self):
        """Epoch seconds (a float), or None without one. One already past as the request
        came (OpenWhisk's tests send "123") is none: the runtime does not enforce it."""
        deadline = _epoch_seconds(self._request.get("deadline"))
        if deadline is None or deadline <= self._arrived:
            return None
        return deadline

    def time_left(self):
        """Seconds left until the deadline (0.0 once it has passed; None without one)."""
        deadline = self.deadline
        if deadline is None:
            return None
        return max(0.0, deadline - time.time())

    def __repr__(self):
        # Never the api_key: a context printed to the logs must not leak it.
        return (
            f"Context(activation_id={self.activation_id!r}, "
            f"action_name={self.action_name!r}, namespace={self.namespace!r}, "
            f"deadline={self.deadline!r})"
        )


def _text(value):
    return value if isinstance(value, str) else ""


def _epoch_seconds(value):
    """The platform's epoch milliseconds (a string, or a number) as seconds."""
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value / 1000.0


def action(main):
    """The `Run` class componentize-py exports as `wasi:cli/run`, serving `main`."""
    # The module is imported while the component is built: a mistake here fails the build,
    # not the first activation.
    if not callable(main):
        raise TypeError(f"action(main) takes the action's function, not {main!r}")

    class Run:
        def run(self) -> None:
            serve(main)

    return Run


def serve(main):
    """Answers each request line on stdin with `main`, until stdin ends."""
    stdout = sys.stdout
    # Bytes, so that each answer is one write with nothing re-encoding it on the way.
    results = stdout.buffer
    # Keeps a stray print() from becoming an answer, which would make the runtime restart
    # the action (502).
    sys.stdout = sys.stderr
    try:
        if os.environ.get("__OW_WAIT_FOR_ACK"):
            _send(results, b'{"ok":true}')
        api_host = os.environ.get("__OW_API_HOST", "")
        # Bytes: a line that is not UTF-8 gets its answer, and the loop goes on.
        for raw in sys.stdin.buffer:
            if not raw.strip():
                continue
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                answer = _error(
                    f"the request line is not UTF-8 (byte {error.start} is not): "
                    "a request is JSON text"
                )
            else:
                answer = _answer(main, line, api_host)
            # The activation's logs before its answer: the runtime ends its logs with it.
            sys.stderr.flush()
            _send(results, answer)
    finally:
        sys.stdout = stdout


def _send(results, line):
    results.write(line + b"\n")
    results.flush()


def _answer(main, line, api_host):
    """One request line's answer, as bytes of JSON."""
    try:
        request = json.loads(line)
    except (ValueError, RecursionError) as error:
        return _error(f"the request line is not JSON: {error}")
    if not isinstance(request, dict):
        return _error("the request line is not a JSON object")
    args = request.get("value")
    if args is None:
        args = {}
    try:
        result = main(args, Context(request, api_host))
    except Exception as error:  # the action's own failure answers, the instance serves on
        # From the action's own frame: the SDK's line above it tells the author nothing.
        traceback.print_exception(type(error), error, error.__traceback__.tb_next)
        try:
            message = str(error)
        except Exception:  # a broken __str__ must not stop the instance
            message = ""
        name = type(error).__name__
        return _error(f"{name}: {message}" if message else name)
    if not isinstance(result, (dict, list)):
        return _error(_not_a_dict(result))
    try:
        text = json.dumps(result, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        return text.encode("utf-8")
    # ValueError: NaN or infinity, or a list that holds itself; RecursionError: nested
    # too deep; UnicodeEncodeError (a ValueError): a lone surrogate.
    except (TypeError, ValueError, RecursionError) as error:
        return _error(f"the action's result cannot be written as JSON: {error}")


def _not_a_dict(value):
    """What was returned instead of an object, in JSON's words (as every SDK says it) and
    Python's."""
    if value is None:
        return (
            "the action returned null (None), not an object (a dict): "
            "does main end without a return?"
        )
    kind = type(value).__name__
    if isinstance(value, bool):
        json_kind = "a boolean"
    elif isinstance(value, (int, float)):
        json_kind = "a number"
    elif isinstance(value, str):
        json_kind = "a string"
    else:
        json_kind = ("an " if kind[0] in "aeiou" else "a ") + kind
    shown = repr(value)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    return f"the action returned {json_kind} ({kind}), not an object (a dict): {shown}"


def _error(message):
    text = json.dumps({"error": message}, separators=(",", ":"), ensure_ascii=False)
    return text.encode("utf-8", "replace")


class FetchError(OSError):
    """An HTTP request that got no response: refused by the runtime's allow-list, a
    connection refused, a name not found, a timeout."""


class Response:
    """What `fetch` got back: `status` (an int), `headers` (a dict of lower-case names to
    values, repeated ones joined with ", "), `body` (bytes)."""

    __slots__ = ("status", "headers", "body")

    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers
        self.body = body

    def text(self, encoding="utf-8"):
        return self.body.decode(encoding, "replace")

    def json(self):
        return json.loads(self.body)

    def __repr__(self):
        return f"Response(status={self.status}, {len(self.body)} bytes)"


# The most a blocking write of wasi:io may take at once.
_WRITE_CHUNK = 4096


def fetch(url, method="GET", headers=None, body=None):
    """Sends one HTTP request through wasi:http and returns its `Response` (any status: a
    404 is a response too). `headers` is a dict or a list of (name, value) pairs; `body`
    bytes or a str (sent as UTF-8, with its Content-Length). Raises `FetchError` when no
    response comes; the activation's deadline bounds the wait."""
    if _http is None:
        raise FetchError(
            "fetch needs wasi:http: build the action as a component for the template's "
            "world (componentize-py -d wit -w action ...), or use urllib.request"
        )
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"fetch takes an http:// or https:// URL with a host, not {url!r}")
    if isinstance(body, str):
        body = body.encode("utf-8")
    pairs = list(headers.items() if isinstance(headers, dict) else headers or ())
    fields = [(str(name), str(value).encode("utf-8")) for name, value in pairs]
    if body and not any(name.lower() == "content-length" for name, _ in fields):
        fields.append(("content-length", str(len(body)).encode()))
    request = _http.OutgoingRequest(_http.Fields.from_list(fields))
    request.set_method(_method(method))
    request.set_scheme(_http.Scheme_Https() if parts.scheme == "https" else _http.Scheme_Http())
    request.set_authority(parts.netloc)
    request.set_path_with_query((parts.path or "/") + (f"?{parts.query}" if parts.query else ""))
    outgoing = request.body()
    future = _outgoing_handler.handle(request, None)
    if body:
        # Dropped before its body is finished: WASI resources go children first.
        with outgoing.write() as stream:
            for start in range(0, len(body), _WRITE_CHUNK):
                stream.blocking_write_and_flush(body[start : start + _WRITE_CHUNK])
    _http.OutgoingBody.finish(outgoing, None)
    with future:
        while (ready := future.get()) is None:
            with future.subscribe() as pollable:
                _poll.poll([pollable])
    if isinstance(ready.value, _Err):
        raise FetchError(f"{method} {url} got no response: {_error_code(ready.value.value)}")
    # The headers and the body are the response's children: each goes before it.
    with ready.value.value as response:
        with response.headers() as fields:
            got = {}
            for name, value in fields.entries():
                text = value.decode("utf-8", "replace")
                got[name] = f"{got[name]}, {text}" if name in got else text
        chunks = []
        with response.consume() as incoming:
            with incoming.stream() as stream:
                while True:
                    try:
                        chunks.append(stream.blocking_read(65536))
                    except _Err as error:
                        if isinstance(error.value, _streams.StreamError_Closed):
                            break
                        raise FetchError(f"{method} {url}: the response's body broke off") from None
        return Response(response.status(), got, b"".join(chunks))


# wasi:http's own method cases; any other method is sent as `other`.
_METHODS = {
    "GET": "Method_Get", "HEAD": "Method_Head", "POST": "Method_Post",
    "PUT": "Method_Put", "DELETE": "Method_Delete", "CONNECT": "Method_Connect",
    "OPTIONS": "Method_Options", "TRACE": "Method_Trace", "PATCH": "Method_Patch",
}


def _method(name):
    case = _METHODS.get(name.upper())
    return getattr(_http, case)() if case else _http.Method_Other(name)


def _error_code(code):
    """wasi:http's error code in words, and what to change for the usual ones."""
    name = type(code).__name__.removeprefix("ErrorCode_")
    payload = getattr(code, "value", None)
    said = f"{name} ({payload})" if payload is not None else name
    if name == "HttpRequestDenied":
        return f"{said}: the host is not in the runtime's --allow-outbound list"
    return said
