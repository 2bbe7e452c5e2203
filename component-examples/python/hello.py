"""The hello action as a Python component: `{"name": "Mike"}` gives a greeting."""

import sys

from wasmloop_action import action


def main(args, ctx):
    name = args.get("name", "Stranger")
    print(f"hello: greeting {name}", file=sys.stderr)
    return {"message": f"Hello, {name}!"}


Run = action(main)
