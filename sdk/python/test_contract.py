"""The SDKs' shared contract (sdk/contract.json), served by wasmloop_action.

Run: python3 -m unittest discover -s sdk/python
"""

import io
import json
import os
import sys
import unittest

import wasmloop_action

CONTRACT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "contract.json")


def contract(value, ctx):
    """The contract action, as sdk/contract.json describes it."""
    what = value.get("do", "echo")
    if what == "deadline":
        left = ctx.time_left()
        return {"deadline": "none" if left is None else "past" if left == 0 else "future"}
    if what == "number":
        return 42
    if what == "fail":
        raise ValueError("asked to fail")
    if what == "panic":
        raise RuntimeError("asked to panic")
    if what == "print":
        print("printed")
        return {"printed": True}
    if what == "greet":
        name = value.get("name")
        if not isinstance(name, str):
            raise TypeError(f"name must be a string, not {type(name).__name__}")
        return {"message": f"Hello, {name}!"}
    return value


def input_line(entry):
    if isinstance(entry, str):
        return entry.encode("utf-8")
    if "hex" in entry:
        return bytes.fromhex(entry["hex"])
    return json.dumps({"value": {"do": "echo", "s": "x" * entry["echo_of"]}}).encode()


def matches(expected, answer):
    error = answer.get("error") if isinstance(answer, dict) and len(answer) == 1 else None
    if "exact" in expected:
        return answer == expected["exact"]
    if "error_starts" in expected:
        return isinstance(error, str) and error.startswith(expected["error_starts"])
    if "error_has" in expected:
        return isinstance(error, str) and expected["error_has"] in error
    if expected.get("error") is True:
        return isinstance(error, str)
    return answer == {"do": "echo", "s": "x" * expected["echo_of"]}


def serve(requests):
    """The answers wasmloop_action.serve writes for `requests` (bytes), as parsed JSON."""
    stdin, stdout, stderr = sys.stdin, sys.stdout, sys.stderr
    answers = io.BytesIO()
    sys.stdin = io.TextIOWrapper(io.BytesIO(requests), encoding="utf-8")
    sys.stdout = io.TextIOWrapper(answers, encoding="utf-8")
    # Tracebacks of the failing cases: kept out of the test's output.
    sys.stderr = io.StringIO()
    try:
        wasmloop_action.serve(contract)
        sys.stdout.flush()
        return [json.loads(line) for line in answers.getvalue().splitlines()]
    finally:
        sys.stdin, sys.stdout, sys.stderr = stdin, stdout, stderr


class SharedContract(unittest.TestCase):
    def test_every_case_of_the_shared_contract(self):
        with open(CONTRACT, encoding="utf-8") as file:
            cases = json.load(file)["cases"]
        self.assertGreaterEqual(len(cases), 10)
        for case in cases:
            if "python" in case.get("differs", {}):
                continue
            with self.subTest(case["name"]):
                lines = [input_line(entry) for entry in case["input"]]
                requests = b"\n".join(lines)
                if not case.get("last_without_newline"):
                    requests += b"\n"
                answers = serve(requests)
                self.assertEqual(len(answers), len(case["answers"]), answers)
                for answer, expected in zip(answers, case["answers"]):
                    shown = json.dumps(answer)[:300]
                    self.assertTrue(matches(expected, answer), f"expected {expected}, got {shown}")




class FetchOutsideAComponent(unittest.TestCase):
    def test_fetch_says_what_it_needs_where_there_is_no_wasi_http(self):
        with self.assertRaises(wasmloop_action.FetchError) as raised:
            wasmloop_action.fetch("http://example.org/")
        self.assertIn("fetch needs wasi:http", str(raised.exception))
        self.assertIn("urllib.request", str(raised.exception))


if __name__ == "__main__":
    unittest.main()
