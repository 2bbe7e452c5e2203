#!/usr/bin/env bash
# Says whether crates.io has a newer patch of the wasmtime line Cargo.lock holds (48, a
# long-term-support line: its patches carry security fixes), for each wasmtime crate the
# runtime builds with, and whether Cargo can move to it: some of the line's crates pin
# wasmtime's internal crates exactly (wiggle 48.0.8 needs wasmtime-environ =48.0.8), so a
# patch of wasmtime alone may have to wait for theirs. Reads crates.io's sparse index and
# asks Cargo (`cargo update --dry-run`); changes nothing.
# Exit status: 0 up to date; 10 a patch Cargo can take (the command is printed); 11 a
# patch Cargo cannot take yet (why is printed); 2 crates.io could not be read.
# Usage: scripts/wasmtime-patches.sh
set -euo pipefail
cd "$(dirname "$0")/.."
crates="wasmtime wasmtime-wasi wasmtime-wasi-http wiggle wasmtime-wizer"
index=$(mktemp -d)
trap 'rm -rf "$index"' EXIT
for crate in $crates; do
  # The sparse index's path: the name's first two letters, the next two, the name.
  if ! curl -fsS --max-time 20 "https://index.crates.io/${crate:0:2}/${crate:2:2}/$crate" -o "$index/$crate"; then
    echo "cannot read crates.io's index for $crate: no network? nothing was checked" >&2
    exit 2
  fi
done
python3 - "$index" $crates <<'PY'
import json, re, sys
index, crates = sys.argv[1], sys.argv[2:]
lock = open("Cargo.lock").read()
def locked(name):
    m = re.search(r'name = "%s"\nversion = "([^"]+)"' % re.escape(name), lock)
    return m.group(1) if m else None
def key(v):
    return tuple(int(x) for x in v.split("."))
current = locked("wasmtime")
line = current.split(".")[0]
newest = {}
for crate in crates:
    versions = [json.loads(l) for l in open(f"{index}/{crate}") if l.strip()]
    same_line = [v["vers"] for v in versions
                 if v["vers"].split(".")[0] == line and not v["yanked"] and "-" not in v["vers"]]
    newest[crate] = max(same_line, key=key) if same_line else None
print(f"Cargo.lock: the wasmtime {line} line at {current}")
for crate in crates:
    print(f"  {crate:<20} locked {locked(crate) or '-':<8} newest {line}.x on crates.io: {newest[crate] or '-'}")
top = max((v for v in newest.values() if v), key=key)
if key(top) <= key(current):
    print("up to date: no newer patch of the line")
    sys.exit(0)
behind = [c for c in crates if newest[c] is None or key(newest[c]) < key(top)]
if behind:
    print(f"wasmtime {top} exists; not yet published for: {', '.join(behind)}")
import subprocess
tried = subprocess.run(["cargo", "update", "--dry-run", "-p", "wasmtime", "--precise", top],
                       capture_output=True, text=True)
if tried.returncode != 0:
    reason = [l.strip() for l in tried.stderr.splitlines() if l.strip()]
    print(f"Cargo cannot take wasmtime {top} yet:")
    for l in reason[-6:]:
        print(f"  {l}")
    print("wait for the other crates' patches; rerun this script then")
    sys.exit(11)
print(f"take it: cargo update -p wasmtime --precise {top} (and each crate above that has "
      f"{top}), then scripts/test.sh")
sys.exit(10)
PY
