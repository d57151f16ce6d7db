"""`python -m healtrl <command>` (also `torchrun --nproc_per_node N -m healtrl eval ...`): the `healtrl` command."""

import sys

from healtrl.cli import main

sys.exit(main())
