"""Write the `train --help` texts shipped in `healtrl/cli/help/` (see `healtrl.cli.help_text`).

    python scripts/write_help_texts.py

Run it after a change to a trainer's config fields, the registry, or the pinned TRL / transformers versions;
`tests/test_cli_help_text.py` fails until the texts are current.
"""

from __future__ import annotations

import argparse

from healtrl.cli.config import format_help
from healtrl.cli.help_text import HELP_DIR, PROG, help_path, versions_line
from healtrl.trainers import TRAINERS


def main(argv=None) -> int:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args(argv)
    HELP_DIR.mkdir(exist_ok=True)
    for old in HELP_DIR.glob("*.txt"):
        old.unlink()
    for name in [None, *sorted(TRAINERS)]:
        path = help_path(name)
        path.write_text(versions_line() + "\n" + format_help(name, prog=PROG) + "\n", encoding="utf-8")
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
