"""The hello action in Python: {"name":"Mike"} -> {"message":"Hello, Mike!"}."""
import sys


def main(args):
    name = args.get("name", "Stranger") if isinstance(args, dict) else "Stranger"
    print(f"hello: greeting {name}", file=sys.stderr)
    return {"message": f"Hello, {name}!"}
