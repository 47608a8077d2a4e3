"""Compare two identity.json files written by check.py.

    python tools/identity/compare.py A.json B.json [--ignore GLOB ...]

Prints every difference (run, file, the path inside a JSON value, A's value, B's value) and
exits 1 if there is any, 0 if the two are identical. --ignore skips the entries whose
"run/file" matches a shell pattern (repeatable), e.g. --ignore '*/model/encoder.py' for a
source file that an export copies into the model directory.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import sys
from typing import Any

MISSING = object()  # a key or list item one side lacks


def short(v: Any, width: int = 160) -> str:
    if v is MISSING:
        return "<absent>"
    s = json.dumps(v, sort_keys=True)
    return s if len(s) <= width else s[:width - 3] + "..."


def diff(a: Any, b: Any, path: str, out: list) -> None:
    """Appends (path, a's value, b's value) to out for every place where a and b differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            diff(a.get(k, MISSING), b.get(k, MISSING), f"{path}/{k}" if path else str(k), out)
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            out.append(((path + " " if path else "") + f"(length {len(a)} vs {len(b)})",
                        MISSING, MISSING))
        for i in range(max(len(a), len(b))):
            diff(a[i] if i < len(a) else MISSING, b[i] if i < len(b) else MISSING,
                 f"{path}[{i}]", out)
    elif a is MISSING or b is MISSING or type(a) is not type(b) or a != b:
        # floats compared exactly: identity, not closeness (NaN == NaN counts as equal)
        if isinstance(a, float) and isinstance(b, float) and a != a and b != b:
            return
        out.append((path, a, b))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("a", help="identity.json of one side (A)")
    ap.add_argument("b", help="identity.json of the other side (B)")
    ap.add_argument("--ignore", action="append", default=[], metavar="GLOB",
                    help="skip entries whose run/file matches (repeatable)")
    args = ap.parse_args(argv)
    with open(args.a) as f:
        A = json.load(f)
    with open(args.b) as f:
        B = json.load(f)
    n_diff = n_entries = 0
    for run in sorted(set(A) | set(B)):
        ra, rb = A.get(run, MISSING), B.get(run, MISSING)
        if ra is MISSING or rb is MISSING:
            print(f"DIFF {run}: only in {'A' if rb is MISSING else 'B'}")
            n_diff += 1
            continue
        if not (isinstance(ra, dict) and isinstance(rb, dict)):
            ra, rb = {"": ra}, {"": rb}
        for file in sorted(set(ra) | set(rb)):
            key = f"{run}/{file}"
            if any(fnmatch.fnmatchcase(key, g) for g in args.ignore):
                continue
            n_entries += 1
            fa, fb = ra.get(file, MISSING), rb.get(file, MISSING)
            if fa is MISSING or fb is MISSING:
                print(f"DIFF {key}: only in {'A' if fb is MISSING else 'B'}")
                n_diff += 1
                continue
            found: list = []
            diff(fa, fb, "", found)
            for path, va, vb in found:
                where = f"{key}" + (f" :: {path}" if path else "")
                if va is MISSING and vb is MISSING:
                    print(f"DIFF {where}")
                else:
                    print(f"DIFF {where}\n    A: {short(va)}\n    B: {short(vb)}")
                n_diff += 1
    if n_diff:
        print(f"compare: {n_diff} difference(s) ({n_entries} entries compared)")
        return 1
    print(f"compare: identical ({n_entries} entries compared in {len(set(A))} runs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
