"""The bad-input table of docs/reliability.md: every mistake of tests/helpers/mistakes.py run
through the real CLI, with its exit status, its message and what it left behind.

    python benchmarks/bad_input_table.py > /tmp/table.md
"""

import pathlib
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from helpers.mistakes import MISTAKES, attempt  # noqa: E402


def main() -> None:
    print("| # | mistake | exit | message | left behind | seconds |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for k, m in enumerate(MISTAKES, 1):
            out = attempt(m, pathlib.Path(tmp) / f"m{k}", process=True)  # the real command, Python's start included
            msg = out.message.replace(tmp, "…").replace("|", "\\|") if m.expect else "(prints the usage)"
            print(f"| {k} | {m.what} | {out.status} | `{msg}` | {', '.join(out.left) or 'nothing'} | "
                  f"{out.seconds:.1f} |", flush=True)


if __name__ == "__main__":
    main()
