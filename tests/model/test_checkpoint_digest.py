"""A checkpoint's content digest: the sha256 of its files, computed once per file version."""

from __future__ import annotations

import hashlib
import os
import shutil

import pytest

from model.checkpoint import digest as checkpoint_digest
from model.checkpoint.digest import checkpoint_digest as digest_of
from model.checkpoint.digest import file_digest


@pytest.fixture
def hashed(monkeypatch) -> list[str]:
    """The files hashed from now on (hashing is what the memo saves)."""
    calls: list[str] = []
    real = checkpoint_digest._sha256

    def counting(path):
        calls.append(path.name)
        return real(path)

    monkeypatch.setattr(checkpoint_digest, "_sha256", counting)
    return calls


def test_a_file_is_hashed_once_then_remembered_until_it_changes(tmp_path, hashed):
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(b"a" * 1000)
    first = file_digest(weights, tmp_path / "memo")
    assert first == hashlib.sha256(b"a" * 1000).hexdigest()
    assert file_digest(weights, tmp_path / "memo") == first and hashed == ["model.safetensors"]
    weights.write_bytes(b"b" * 1000)  # same size, new content
    assert file_digest(weights, tmp_path / "memo") == hashlib.sha256(b"b" * 1000).hexdigest()
    replacement = tmp_path / "new"
    replacement.write_bytes(b"a" * 1000)
    os.utime(replacement, ns=(weights.stat().st_atime_ns, weights.stat().st_mtime_ns))
    replacement.replace(weights)  # same size and mtime, another file: its inode and ctime differ
    assert file_digest(weights, tmp_path / "memo") == first and len(hashed) == 3


def test_a_hub_snapshot_file_is_named_by_its_blob_without_hashing(tmp_path, hashed):
    content = b"weights"
    blob = tmp_path / "blobs" / hashlib.sha256(content).hexdigest()
    blob.parent.mkdir()
    blob.write_bytes(content)
    snapshot = tmp_path / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (snapshot / "model.safetensors").symlink_to(os.path.relpath(blob, snapshot))
    assert file_digest(snapshot / "model.safetensors", tmp_path / "memo") == blob.name
    assert hashed == []


def test_the_checkpoint_digest_covers_config_and_every_weight_file(tiny_ckpt, tmp_path):
    copy = shutil.copytree(tiny_ckpt, tmp_path / "copy")
    original = digest_of(copy, tmp_path / "memo")
    assert digest_of(shutil.copytree(copy, tmp_path / "same"), tmp_path / "memo") == original
    config = copy / "config.json"
    config.write_text(config.read_text().replace("{", '{"note": 1, ', 1))
    assert digest_of(copy, tmp_path / "memo") != original
