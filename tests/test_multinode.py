"""Two nodes on one machine (issue #29 item 3): the multi-node launch rehearsed as 2 machines x 1 CPU process on
127.0.0.1, and a killed second node. Slow (each launch 1-2 min on 2 shared cores, most of it start-up); `.ci/release`.

Each "node" is its own launcher, started as on a second machine (its own session, its own output), rendezvousing at
127.0.0.1 on a free port:

- `accelerate launch` with the shipped multi-node config, `configs/accelerate/multinode_2x8.yaml`, sized down on the
  command line (`--num_machines 2 --num_processes 2 --machine_rank {0,1} --main_process_ip 127.0.0.1
  --main_process_port P --mixed_precision no`); FSDP2 with `configs/accelerate/fsdp2_cpu2.yaml` and the same
  overrides (with `HEALTRL_SHARD_ON_CPU=1`, the CPU rehearsal, see tests/test_accelerate_launch.py);
- `torchrun --nnodes 2 --node_rank {0,1} --nproc_per_node 1 --master_addr 127.0.0.1 --master_port P`; for FSDP2 with
  the environment that `accelerate launch` gives its workers for `fsdp2_cpu2.yaml` (`FSDP_ENV`).

Every launch trains `train.py` on configs/toy_grpo.yaml (2 steps, 16 completions per process, float32) and must end
with the weights of the 2-process single-node launch (`configs/accelerate/ddp_cpu2.yaml`): the same 2 ranks and seeds,
so the same rollouts and gradients; only sharding may reorder float32 reductions (tolerance `WEIGHT_ATOL`, observed 0).

A killed node: node 1's launcher and its worker are killed together (SIGKILL to every process of the node, as when a
machine dies; torchrun starts its workers in sessions of their own) during training. Node 0's worker fails at its next
collective (gloo sees the closed connection), train.py names the lost peer (`lost_peer_note`: this process's rank and
node, the peer's address and the node it is on), and node 0's launcher exits nonzero within `KILLED_NODE_BOUND_S`
instead of hanging (observed: 6-10 s). A node that stops answering without closing its connections (a frozen
machine, here SIGSTOP) is bounded by the process-group timeout, `--ddp_timeout` seconds (TrainingArguments; 1800 by
default), which the test sets to `DDP_TIMEOUT_S` (observed: exit 36 s after the stop). transformers passes
`ddp_timeout` to accelerate on accelerators only; healtrl applies it to a CPU run's gloo group
(`healtrl.utils.distributed.honour_ddp_timeout`), without which this test waits 30 minutes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil  # an accelerate dependency
import pytest
import torch
from transformers import AutoModelForCausalLM

from tests.helpers import ROOT, free_port
from tests.test_accelerate_launch import TRAIN_ARGS, run_launch

WEIGHT_ATOL = 1e-6
KILLED_NODE_BOUND_S = 60  # from the kill to node 0's launcher exiting (observed: a few seconds)
DDP_TIMEOUT_S = 30  # --ddp_timeout of the stopped-node test
STOPPED_NODE_BOUND_S = DDP_TIMEOUT_S + 60
START_TIMEOUT_S = 900  # start-up to the first training step, on a loaded 2-core machine

ACCELERATE_NODE = ["--num_machines", "2", "--num_processes", "2", "--main_process_ip", "127.0.0.1"]
# The FSDP part of what `accelerate launch --config_file configs/accelerate/fsdp2_cpu2.yaml` exports to its workers
# (accelerate 1.15, accelerate.utils.launch.prepare_multi_gpu_env), for the same run under a bare torchrun.
FSDP_ENV = {
    "ACCELERATE_USE_FSDP": "true",
    "ACCELERATE_MIXED_PRECISION": "no",
    "FSDP_VERSION": "2",
    "FSDP_AUTO_WRAP_POLICY": "TRANSFORMER_BASED_WRAP",
    "FSDP_RESHARD_AFTER_FORWARD": "true",
    "FSDP_OFFLOAD_PARAMS": "false",
    "FSDP_STATE_DICT_TYPE": "FULL_STATE_DICT",
    "FSDP_CPU_RAM_EFFICIENT_LOADING": "true",
    "FSDP_SYNC_MODULE_STATES": "true",
    "FSDP_ACTIVATION_CHECKPOINTING": "false",
    "HEALTRL_SHARD_ON_CPU": "1",
}


def node_command(launcher: str, sharding: str, rank: int, port: int) -> tuple[list[str], dict[str, str]]:
    """(argv before `train.py`'s arguments, extra environment) of node `rank`."""
    if launcher == "accelerate":
        config = "multinode_2x8.yaml" if sharding == "ddp" else "fsdp2_cpu2.yaml"
        cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", f"configs/accelerate/{config}"]
        cmd += [*ACCELERATE_NODE, "--machine_rank", str(rank), "--main_process_port", str(port)]
        cmd += ["--mixed_precision", "no"]
        env = {"HEALTRL_SHARD_ON_CPU": "1"} if sharding == "fsdp2" else {}
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node_rank", str(rank)]
        cmd += ["--nproc_per_node", "1", "--master_addr", "127.0.0.1", "--master_port", str(port)]
        env = dict(FSDP_ENV) if sharding == "fsdp2" else {}
    return cmd, env


def start_node(launcher, sharding, rank, port, output_dir: Path, log: Path, *extra) -> subprocess.Popen:
    """Start node `rank`'s launcher in its own session (so that it can be killed as a whole machine dies)."""
    cmd, node_env = node_command(launcher, sharding, rank, port)
    train = [*TRAIN_ARGS, "--output_dir", str(output_dir)]
    if sharding == "fsdp2":
        train += ["--use_cpu", "false"]  # the toy config's use_cpu: true would make accelerate ignore FSDP
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HEALTRL_SHARD", "ACCELERATE_", "FSDP_"))}
    env.update(OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", PYTHONPATH=str(ROOT), **node_env)
    with open(log, "w") as out:
        return subprocess.Popen([*cmd, "train.py", *train, *extra], cwd=ROOT, env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip


def node_processes(node: subprocess.Popen) -> list[psutil.Process]:
    """The launcher and everything under it (torchrun's workers run in sessions of their own, so a process group
    is not the node)."""
    try:
        root = psutil.Process(node.pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def kill_node(node: subprocess.Popen, sig=signal.SIGKILL, processes=None) -> list[psutil.Process]:
    """Send `sig` to every process of the node (or to `processes`), as when its machine dies (SIGKILL) or freezes
    (SIGSTOP); returns the processes signalled."""
    processes = node_processes(node) if processes is None else processes
    for process in processes:
        try:
            process.send_signal(sig)
        except psutil.NoSuchProcess:
            pass
    return processes


def wait_all(nodes, timeout: float) -> list[int]:
    """The nodes' exit codes; whatever of theirs still runs after `timeout` seconds is killed."""
    deadline = time.monotonic() + timeout
    try:
        return [node.wait(timeout=max(1.0, deadline - time.monotonic())) for node in nodes]
    finally:
        for node in nodes:
            kill_node(node)  # also workers left behind by a launcher that exited
            node.wait()


def load_params(folder) -> dict[str, torch.Tensor]:
    return {n: p.detach() for n, p in AutoModelForCausalLM.from_pretrained(folder).named_parameters()}


@pytest.fixture(scope="module")
def single_node_weights(tmp_path_factory):
    """The reference: the 2-process single-node launch (configs/accelerate/ddp_cpu2.yaml)."""
    out = tmp_path_factory.mktemp("single_node")
    result = run_launch("ddp_cpu2.yaml", out)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    return load_params(out)


@pytest.mark.slow
@pytest.mark.parametrize("sharding", ["ddp", "fsdp2"])
@pytest.mark.parametrize("launcher", ["accelerate", "torchrun"])
def test_two_nodes_on_one_machine_train_to_the_single_node_weights(launcher, sharding, single_node_weights, tmp_path):
    port, out = free_port(), tmp_path / "out"
    logs = [tmp_path / f"node{rank}.log" for rank in range(2)]
    nodes = [start_node(launcher, sharding, rank, port, out, logs[rank]) for rank in (1, 0)][::-1]
    codes = wait_all(nodes, START_TIMEOUT_S)
    output = [log.read_text() for log in logs]
    assert codes == [0, 0], "\n".join(o[-4000:] for o in output)
    assert "Done. Output folder" in output[0]  # rank 0 (node 0) saves the model
    if sharding == "fsdp2":
        for rank in range(2):  # each node's process reports its own rank: FSDP across the two nodes
            line = f"healtrl CPU rehearsal, rank {rank}/2: DistributedType.FSDP, LM head weight DTensor"
            assert line in output[rank], output[rank][-3000:]
    weights = load_params(out)
    assert weights.keys() == single_node_weights.keys()
    for name, reference in single_node_weights.items():
        torch.testing.assert_close(weights[name], reference, rtol=0, atol=WEIGHT_ATOL, msg=name)


def start_and_wait_for_training(tmp_path, *extra) -> tuple[list[subprocess.Popen], list[Path]]:
    """Both nodes of the multi-node accelerate config, a long run; returns once node 0 logged a training step."""
    port, out = free_port(), tmp_path / "out"
    logs = [tmp_path / f"node{rank}.log" for rank in range(2)]
    args = ["--max_steps", "100000", "--save_strategy", "no", *extra]
    nodes = [start_node("accelerate", "ddp", rank, port, out, logs[rank], *args) for rank in (1, 0)][::-1]
    deadline = time.monotonic() + START_TIMEOUT_S
    while "'loss':" not in logs[0].read_text():
        if any(node.poll() is not None for node in nodes) or time.monotonic() > deadline:
            wait_all(nodes, 1)
            pytest.fail("no training step: " + "\n".join(log.read_text()[-3000:] for log in logs))
        time.sleep(0.5)
    time.sleep(2)  # a few steps in
    return nodes, logs


def assert_node0_names_the_lost_peer(output: str) -> None:
    assert "healtrl: this process (rank 0 of 2, node 0 of 2) lost another process" in output, output[-5000:]
    assert "is on node 1 (rank 1): it died, crashed or stopped answering" in output, output[-5000:]


@pytest.mark.slow
def test_killed_second_node_makes_the_first_exit_with_an_error_naming_it(tmp_path):
    nodes, logs = start_and_wait_for_training(tmp_path)
    kill_node(nodes[1])
    killed = time.monotonic()
    try:
        code = nodes[0].wait(timeout=KILLED_NODE_BOUND_S)
    except subprocess.TimeoutExpired:
        code = None
    elapsed = time.monotonic() - killed
    wait_all(nodes, 1)
    output = logs[0].read_text()
    print(f"node 0 exited with {code} {elapsed:.1f} s after node 1 was killed")
    assert code is not None, f"node 0 still running {KILLED_NODE_BOUND_S} s after node 1 was killed\n{output[-5000:]}"
    assert code != 0, output[-5000:]
    assert_node0_names_the_lost_peer(output)


@pytest.mark.slow
def test_stopped_second_node_makes_the_first_exit_after_the_ddp_timeout(tmp_path):
    nodes, logs = start_and_wait_for_training(tmp_path, "--ddp_timeout", str(DDP_TIMEOUT_S))
    frozen = kill_node(nodes[1], signal.SIGSTOP)  # its sockets stay open: only the timeout can tell
    stopped = time.monotonic()
    try:
        code = nodes[0].wait(timeout=STOPPED_NODE_BOUND_S)
    except subprocess.TimeoutExpired:
        code = None
    elapsed = time.monotonic() - stopped
    kill_node(nodes[1], signal.SIGKILL, frozen)
    wait_all(nodes, 1)
    output = logs[0].read_text()
    print(f"node 0 exited with {code} {elapsed:.1f} s after node 1 stopped (ddp_timeout {DDP_TIMEOUT_S} s)")
    assert code is not None, f"node 0 still running {STOPPED_NODE_BOUND_S} s after node 1 stopped\n{output[-5000:]}"
    assert code != 0, output[-5000:]
    assert elapsed >= DDP_TIMEOUT_S - 5, elapsed  # it waited for the timeout: no earlier sign of the frozen node
    assert_node0_names_the_lost_peer(output)


GLOO_RESET = (
    "[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error [10.0.0.2]:41234: Connection reset by "
    "peer. This is typically caused by a remote worker hanging or bugs in the application."
)


@pytest.mark.parametrize(
    "world,per_node,node,where",
    [(2, 1, 0, "node 1 (rank 1)"), (16, 8, 1, "node 0 (ranks 0-7)"), (3, 1, 0, "one of nodes 1 (rank 1), 2 (rank 2)")],
)
def test_lost_peer_note_names_this_process_and_the_lost_node(monkeypatch, world, per_node, node, where):
    """train.py's note for a collective that lost a peer (the launches above show it in a real run)."""
    import runpy

    import torch.distributed as dist

    note = runpy.run_path(str(ROOT / "train.py"), run_name="train")["lost_peer_note"]
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_rank", lambda: node * per_node)
    monkeypatch.setattr(dist, "get_world_size", lambda: world)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", str(per_node))
    monkeypatch.setenv("GROUP_RANK", str(node))
    text = note(RuntimeError(GLOO_RESET))
    nodes = world // per_node
    assert text.startswith(f"healtrl: this process (rank {node * per_node} of {world}, node {node} of {nodes}) lost")
    assert "Connection reset by peer" in text and f"The lost process at [10.0.0.2]:41234 is on {where}: it" in text
    assert "--ddp_timeout" in text
    frozen = note(RuntimeError("Application timeout caused pair closure"))  # gloo, after --ddp_timeout
    assert f"is on {where}: it died, crashed or stopped answering" in frozen
    assert note(ValueError("a bug of the run's own")) is None  # not a lost peer: no note


def test_ddp_timeout_reaches_the_gloo_group_of_a_cpu_run(monkeypatch):
    """transformers leaves a CPU run's gloo group at torch's 30 minutes; run_training applies --ddp_timeout."""
    import datetime

    import torch.distributed as dist

    from healtrl.utils.distributed import honour_ddp_timeout

    assert not dist.is_initialized()
    honour_ddp_timeout(7)  # outside a launch: nothing to do
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        backend = dist.distributed_c10d._get_default_group()._get_backend(torch.device("cpu"))
        assert backend.options._timeout == datetime.timedelta(minutes=30)
        honour_ddp_timeout(7)
        assert backend.options._timeout == datetime.timedelta(seconds=7)
    finally:
        dist.destroy_process_group()
