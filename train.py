#!/usr/bin/env python
"""Train with a healtrl trainer from a flat YAML config plus command-line overrides.

    python train.py                                   # the main job: HEAL vs few-shot GRPO on the toy world (CPU)
    python train.py --config configs/toy_grpo_lora.yaml --max_steps 20
    python train.py --config my_run.yaml --help       # every field of the selected trainer
    accelerate launch --config_file configs/accelerate/ddp_8gpu.yaml train.py --config my_run.yaml
    torchrun --nproc_per_node 2 train.py --config configs/toy_grpo.yaml --per_device_train_batch_size 64

`healtrl train ...` runs the same thing. See healtrl/cli/main_job.py for the main job and healtrl/cli/ for what a run
writes to `output_dir`.
"""

import os
import re
import sys

from healtrl.cli import train_main


def shut_down_process_group() -> None:
    """End a torchrun / accelerate launch worker cleanly: a live gloo process group can hang or abort the exit."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


# What the backends say when a peer is gone: gloo `Connection reset/closed by peer`, `Application timeout caused pair
# closure` (after --ddp_timeout), `Timed out waiting ...`; NCCL `... watchdog ... timeout`, `remote process exited`.
LOST_PEER = r"gloo|NCCL|c10d|[Tt]imed? ?out|[Cc]onnection (reset|closed|refused)|pair closure|remote process"


def lost_peer_note(exc: BaseException) -> str | None:
    """For a collective that failed because another process of the run is gone (killed, crashed, frozen past
    `--ddp_timeout`, network down): one paragraph naming this process and the lost peer, else None.

    The backend's error names only the peer's address (gloo: `[10.0.0.2]:41234`); the paragraph adds the nodes the
    peer can be on (every node but this one, from torchrun's GROUP_RANK / LOCAL_WORLD_SIZE, which `accelerate launch`
    sets too): with two nodes, the other one.
    """
    import torch.distributed as dist

    message = str(exc)
    backend_error = isinstance(exc, getattr(dist, "DistError", ())) or re.search(LOST_PEER, message)
    if not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1 and backend_error):
        return None
    rank, world = dist.get_rank(), dist.get_world_size()
    per_node = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    nodes, node = max(1, world // max(1, per_node)), int(os.environ.get("GROUP_RANK", rank // max(1, per_node)))
    others = [n for n in range(nodes) if n != node]

    def ranks(n: int) -> str:
        first, last = n * per_node, (n + 1) * per_node - 1
        return f"rank {first}" if first == last else f"ranks {first}-{last}"

    if len(others) == 1:
        where = f"node {others[0]} ({ranks(others[0])})"
    elif others:
        where = "one of nodes " + ", ".join(f"{n} ({ranks(n)})" for n in others)
    else:
        where = "this node (another local process)"
    peer = re.search(r"\[[^\]]+\]:\d+", message)
    first_line = message.strip().splitlines()[0] if message.strip() else type(exc).__name__
    at = f" at {peer.group(0)}" if peer else ""
    return (
        f"healtrl: this process (rank {rank} of {world}, node {node} of {nodes}) lost another process of the run in "
        f"a collective operation: {first_line}\nThe lost process{at} is on {where}: "
        "it died, crashed or stopped answering (a frozen machine is reported after --ddp_timeout seconds, 1800 by "
        "default). Check that node's log; the run cannot continue without it: restart every node (with "
        "--resume_from_checkpoint true to go on from the last checkpoint)."
    )


if __name__ == "__main__":
    try:
        code = train_main(sys.argv[1:])
    except Exception as exc:
        note = lost_peer_note(exc)
        if note:
            print(note, file=sys.stderr, flush=True)
        raise
    finally:
        shut_down_process_group()
    sys.exit(code)
