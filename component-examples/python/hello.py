"""The hello action as a Python component: `{"name": "Mike"}` gives a greeting."""

import sys

from wit_world import exports

from actionloop import serve


def main(args):
    name = args.get("name", "Stranger")
    print(f"hello: greeting {name}", file=sys.stderr)
    return {"message": f"Hello, {name}!"}


class Run(exports.Run):
    def run(self) -> None:
        serve(main)
