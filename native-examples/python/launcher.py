#!/usr/bin/env python3
"""An ActionLoop launcher for Python actions: imports main.py (next to this file) and
serves its function (named by /init's "main", which wasmloop passes as __OW_ACTION_MAIN;
"main" by default) over the native protocol of wasmloop's docs/protocol.md 1.8: an ack on
fd 3 when asked, then one JSON request per line on stdin and one JSON result per line on
fd 3. Logs (print) go to stdout/stderr. It imports first and acknowledges after, so a
main.py that fails to import fails /init, with the error's last line in the answer.
Given a JSON object as first argument, it runs once and prints the result. Standard
library only."""
import importlib.util
import json
import os
import sys
import traceback


def load_main():
    here = os.path.dirname(os.path.abspath(__file__))
    name = os.environ.get("__OW_ACTION_MAIN") or "main"
    spec = importlib.util.spec_from_file_location("action", os.path.join(here, "main.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    function = getattr(module, name, None)
    if not callable(function):
        raise AttributeError(f"main.py has no function {name!r} (the /init \"main\" name)")
    return function


def load_or_explain():
    """The action's function; if it cannot be loaded, the traceback goes to stderr, its
    last line to the runtime on fd 3 (in place of the ack, or before exiting), and the
    launcher exits."""
    try:
        return load_main()
    except BaseException as error:  # a SyntaxError or an import's failure, whatever it is
        traceback.print_exc()
        last = traceback.format_exception_only(type(error), error)[-1].strip()
        try:
            with os.fdopen(3, "w", encoding="utf-8") as results:
                results.write(dumps({"error": last}) + "\n")
        except OSError:  # run by hand, without fd 3
            pass
        sys.exit(1)


def dumps(value):
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def serve(main):
    results = os.fdopen(3, "w", encoding="utf-8")
    if os.environ.get("__OW_WAIT_FOR_ACK"):
        results.write('{"ok":true}\n')
        results.flush()
    for line in sys.stdin:
        try:
            request = json.loads(line)
            for key, value in request.items():
                if key != "value":
                    text = value if isinstance(value, str) else dumps(value)
                    os.environ["__OW_" + key.upper()] = text
            result = main(request.get("value", {}))
        except Exception as error:  # the action's failure is its answer, not ours
            result = {"error": str(error)}
        sys.stdout.flush()
        sys.stderr.flush()
        results.write(dumps(result) + "\n")
        results.flush()


if __name__ == "__main__":
    action = load_or_explain()
    if len(sys.argv) > 1:
        print(dumps(action(json.loads(sys.argv[1]))))
    else:
        serve(action)
