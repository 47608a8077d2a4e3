"""Write docs/flags.md, every command's flags, from the options' declarations
(`electra.api.flags_reference`). tests/test_api.py checks the file is current.

    python tools/flags_doc.py
"""

from __future__ import annotations

import argparse
from pathlib import Path

from electra.api import flags_reference

DOC = Path(__file__).resolve().parents[1] / "docs" / "flags.md"

if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__.split("\n")[0]).parse_args()
    DOC.write_text(flags_reference(), encoding="utf-8")
    print(f"wrote {DOC}")
