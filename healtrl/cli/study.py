"""`healtrl study`: the study of every method on a toy world (`healtrl.study.command`), its report from the cache
(`--report`), and the papers' claims judged on the cached runs (`--claims`, `healtrl.study.claims`).

`healtrl.study.command`, which parses both command lines, imports no torch (the runs import the trainers, the claims
their configs, after the options are parsed), so `healtrl study --help` and `healtrl study --claims --help` need
none.
"""

from __future__ import annotations

import sys

from .common import version_text

CLAIMS_FLAG = "--claims"


def study_main(argv: list[str] | None = None, prog: str = "healtrl study") -> int:
    """`healtrl study ...` (runs, then figures and table), `healtrl study --report` (from the cache) or
    `healtrl study --claims ...` (the claims' table, `claims.md` and `claims.json`). Exit code 0 on success; argparse
    exits with 2 on a usage error, as the script forms do."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--version" in argv and not any(a in ("-h", "--help") for a in argv):
        print(version_text())
        return 0
    from healtrl.study import command

    if CLAIMS_FLAG in argv:
        rest = [a for a in argv if a != CLAIMS_FLAG]
        command.claims_main(rest, prog=f"{prog} {CLAIMS_FLAG}", command=f"{prog} {CLAIMS_FLAG}")
        return 0
    command.main(argv, prog=prog, command=prog)
    return 0
