"""The hello as an HTTP component (componentize-py's wasi:http/proxy world): a JSON body
with a `name` in, `{"message": "Hello, <name>!"}` out. It runs unchanged under
`wasmtime serve`."""

import json
import sys

from componentize_py_types import Ok
from wit_world import exports
from wit_world.imports.types import (
    Fields,
    IncomingRequest,
    OutgoingBody,
    OutgoingResponse,
    ResponseOutparam,
)


def read_body(request: IncomingRequest) -> bytes:
    body = request.consume()
    read = b""
    with body.stream() as stream:
        while True:
            try:
                read += stream.blocking_read(65536)
            except Exception:  # the stream's end (or its failure): what came is the body
                break
    return read


class IncomingHandler(exports.IncomingHandler):
    def handle(self, request: IncomingRequest, response_out: ResponseOutparam) -> None:
        try:
            args = json.loads(read_body(request) or b"{}")
        except ValueError:
            args = {}
        name = args.get("name", "Stranger") if isinstance(args, dict) else "Stranger"
        print(f"hello: greeting {name}", file=sys.stderr)
        answer = json.dumps({"message": f"Hello, {name}!"}).encode()

        response = OutgoingResponse(Fields.from_list([("content-type", b"application/json")]))
        body = response.body()
        ResponseOutparam.set(response_out, Ok(response))
        # The stream is dropped (the `with`) before its body is finished: children first.
        with body.write() as stream:
            stream.blocking_write_and_flush(answer)
        OutgoingBody.finish(body, None)
