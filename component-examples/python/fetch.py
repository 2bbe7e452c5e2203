"""GETs `{"url": "http://host:port/path"}` through wasi:http and returns the status and the
length of the body. The host must be in wasmloop's --allow-outbound list."""

from wasmloop_action import FetchError, action, fetch


def main(args, ctx):
    try:
        response = fetch(args["url"])
    except FetchError as error:  # denied, refused, timed out...
        return {"error": f"the request failed: {error}"}
    return {"status": response.status, "length": len(response.body)}


Run = action(main)
