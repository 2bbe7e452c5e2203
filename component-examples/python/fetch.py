"""GETs `{"url": "http://host:port/path"}` through wasi:http and returns the status and the
length of the body. The host must be in wasmloop's --allow-outbound list."""

from urllib.parse import urlsplit

from componentize_py_types import Err
from wit_world.imports import outgoing_handler, poll, streams
from wit_world.imports import wasi_http_types as types

from wasmloop_action import action


def get(url):
    parts = urlsplit(url)
    request = types.OutgoingRequest(types.Fields())
    request.set_scheme(types.Scheme_Https() if parts.scheme == "https" else types.Scheme_Http())
    request.set_authority(parts.netloc)
    request.set_path_with_query((parts.path or "/") + (f"?{parts.query}" if parts.query else ""))
    future = outgoing_handler.handle(request, None)
    while (ready := future.get()) is None:
        with future.subscribe() as pollable:
            poll.poll([pollable])
    future.__exit__(None, None, None)
    if isinstance(ready.value, Err):  # denied, refused, timed out...
        return {"error": f"the request failed: {ready.value.value}"}
    response = ready.value.value
    # WASI resources have parents: a stream must go before its body, the body before the
    # response. `with` drops each as its block ends, children first; leaving them to the
    # garbage collector can drop a parent first, and the instance traps.
    with response:
        status = response.status()
        length = 0
        with response.consume() as body:
            with body.stream() as stream:
                while True:
                    try:
                        length += len(stream.blocking_read(65536))
                    except Err as e:
                        if isinstance(e.value, streams.StreamError_Closed):
                            break
                        raise
    return {"status": status, "length": length}


def main(args, ctx):
    return get(args["url"])


Run = action(main)
