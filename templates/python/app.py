"""{"name": "Mike"} -> {"message": "Hello, Mike!"}"""

from wasmloop_action import action


def main(args, ctx):
    name = args.get("name") or "Stranger"
    return {"message": f"Hello, {name}!"}


Run = action(main)
