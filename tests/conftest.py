"""Fixtures shared by several test files (pytest finds them here without an import).

* `toy_model_dir`, `toy_models`: the warmed-up toy models (`healtrl.toy.toy_model_path`: built into the healtrl cache
  on first use, found there afterwards), resolved once per session, before any subprocess of a test needs them.
* `no_network`: any attempt to open a network connection fails the test, and the Hugging Face Hub is offline.
* `restore_threads`: torch's CPU thread count is put back after the test (the commands set it, `configure_threads`).
"""

from __future__ import annotations

import socket

import pytest

TOY_MODEL = "healtrl-toy/qwen2-add"
TOY_MODEL_GENERAL = "healtrl-toy/qwen2-add+compare"


@pytest.fixture(scope="session")
def toy_model_dir() -> str:
    """The folder of the warmed-up `healtrl-toy/qwen2-add` (built once, then a cache hit)."""
    from healtrl.toy import toy_model_path

    return toy_model_path(TOY_MODEL)


@pytest.fixture(scope="session")
def toy_models(toy_model_dir) -> list[str]:
    """The folders of both warmed-up toy models: `qwen2-add`, then `qwen2-add+compare` (HEAL's general domain)."""
    from healtrl.toy import toy_model_path

    return [toy_model_dir, toy_model_path(TOY_MODEL_GENERAL)]


@pytest.fixture
def no_network(monkeypatch):
    """Fail any attempt to open a network connection (dry runs and bad-input checks must work without the Hub)."""

    def refuse(*args, **kwargs):
        raise AssertionError(f"the test tried to open a network connection: {args}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    yield


@pytest.fixture
def restore_threads():
    """Put torch's CPU thread count back after the test (`healtrl.cli.configure_threads` changes it)."""
    import torch

    previous = torch.get_num_threads()
    yield
    torch.set_num_threads(previous)
