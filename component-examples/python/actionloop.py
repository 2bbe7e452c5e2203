"""The ActionLoop contract for a Python component: one JSON request per line on stdin, one
JSON result per line on stdout; print() is for results only, so logs go to stderr."""

import json
import sys
import traceback


def serve(main):
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        args = request.get("value") or {}
        try:
            result = main(args)
        except Exception as error:  # the action's own failure is its result, not a crash
            traceback.print_exc(file=sys.stderr)
            result = {"error": f"{type(error).__name__}: {error}"}
        sys.stdout.write(json.dumps(result, separators=(",", ":")) + "\n")
        sys.stdout.flush()
        sys.stderr.flush()
