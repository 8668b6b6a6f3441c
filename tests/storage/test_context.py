"""The context directory: .detignore (gitignore semantics), links, the size limit, the snapshot and
its hard-linked copies."""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path
from typing import Dict, List

import pytest

from determined_lite.storage import (
    DETIGNORE,
    SNAPSHOT_MANIFEST,
    ContextError,
    copy_context,
    disk_usage,
    read_context,
    snapshot_context,
)


def make_tree(root: Path, files: Dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def listed(root: Path) -> List[str]:
    return sorted(read_context(str(root)).files)


def all_files(root: Path) -> List[str]:
    files = [p for p in root.rglob("*") if p.is_file() and not p.is_symlink()]
    return sorted(str(p.relative_to(root)).replace(os.sep, "/") for p in files)


# --- .detignore -----------------------------------------------------------------------------


def test_default_patterns_drop_hidden_files_caches_and_environments(tmp_path: Path) -> None:
    ctx = make_tree(
        tmp_path / "ctx",
        {
            "model_def.py": "",
            "pkg/util.py": "",
            "pkg/__pycache__/util.cpython-311.pyc": "",
            "stale.pyc": "",
            ".env": "TOKEN=1",
            ".git/config": "",
            "venv/lib/site.py": "",
            "node_modules/x.js": "",
            "dist/x.egg-info/PKG-INFO": "",
            "weights.pth": "w",  # kept: a trial may load pretrained weights from its context
        },
    )
    assert listed(ctx) == ["model_def.py", "pkg/util.py", "weights.pth"]


def test_detignore_follows_gitignore_rules(tmp_path: Path) -> None:
    ctx = make_tree(
        tmp_path / "ctx",
        {
            "model_def.py": "",
            "a.log": "",
            "keep.log": "",
            "sub/b.log": "",
            "top.txt": "",
            "sub/top.txt": "",
            "data/x.csv": "",
            "data/keep.csv": "",
            "notes/data": "",  # a file named data: `data/` matches directories only
            "deep/cache/y": "",
            "deep/er/cache/z": "",
            "#hash.py": "",
            ".env": "",
        },
    )
    (ctx / DETIGNORE).write_text(
        "# comments and blank lines are ignored\n\n"
        "*.log\n!keep.log\n"  # negation: last match wins
        "/top.txt\n"  # anchored to the context root
        "data/\n!data/keep.csv\n"  # a file inside an ignored directory cannot be re-included
        "**/cache/\n"
        "\\#hash.py\n"  # escaped leading #
        "!.env\n"  # re-includes a file the default patterns drop
    )
    assert listed(ctx) == [".env", "keep.log", "model_def.py", "notes/data", "sub/top.txt"]


def test_a_detignore_with_a_byte_order_mark_is_read_as_git_reads_it(tmp_path: Path) -> None:
    # Windows editors start a UTF-8 file with a byte-order mark; git skips it, so the first
    # pattern still counts (read as text it became "\ufeffsecret.txt" and matched nothing).
    ctx = make_tree(tmp_path / "ctx", {"model_def.py": "", "secret.txt": "token", "data/x.csv": ""})
    (ctx / DETIGNORE).write_bytes(b"\xef\xbb\xbfsecret.txt\ndata/\n")
    assert listed(ctx) == ["model_def.py"]
    snapshot_context(read_context(str(ctx)), str(tmp_path / "snap"))
    assert not (tmp_path / "snap" / "secret.txt").exists()
    # Only a mark at the very start is skipped, as git does: elsewhere it is part of a pattern.
    (ctx / DETIGNORE).write_bytes(b"data/\n\xef\xbb\xbfsecret.txt\n")
    assert listed(ctx) == ["model_def.py", "secret.txt"]


def test_detignore_file_itself_is_not_part_of_the_context(tmp_path: Path) -> None:
    ctx = make_tree(tmp_path / "ctx", {"model_def.py": "", DETIGNORE: "!.*\n"})
    assert listed(ctx) == ["model_def.py"]


def test_excluded_directories_are_skipped(tmp_path: Path) -> None:
    ctx = make_tree(tmp_path / "ctx", {"model_def.py": "", "ckpts/u/state_dict.pth": "x"})
    found = read_context(str(ctx), exclude=[str(ctx / "ckpts")])
    assert sorted(found.files) == ["model_def.py"] and found.dirs == []


# --- links ----------------------------------------------------------------------------------


def test_links_inside_are_kept_as_relative_links(tmp_path: Path) -> None:
    ctx = make_tree(tmp_path / "ctx", {"model_def.py": "A", "pkg/util.py": "U"})
    os.symlink("model_def.py", ctx / "alias.py")
    os.symlink(str(ctx / "pkg"), ctx / "pkg_abs")  # absolute, but inside
    os.symlink("../model_def.py", ctx / "pkg" / "up.py")
    os.symlink("missing.py", ctx / "dangling.py")
    found = read_context(str(ctx))
    assert found.links == {
        "alias.py": "model_def.py",
        "dangling.py": "missing.py",
        "pkg_abs": "pkg",
        "pkg/up.py": "../model_def.py",
    }
    assert sorted(found.files) == ["model_def.py", "pkg/util.py"]  # links add no bytes
    snapshot_context(found, str(tmp_path / "snap"))
    assert os.readlink(tmp_path / "snap" / "pkg_abs") == "pkg"  # no longer points at the original
    assert (tmp_path / "snap" / "pkg" / "up.py").read_text() == "A"


@pytest.mark.parametrize(
    "target, problem",
    [
        ("/etc", "something that is not a regular file"),
        ("../missing.py", "nothing (a dangling link)"),
        ("/dev/null", "something that is not a regular file"),
    ],
)
def test_a_link_out_of_the_context_to_no_regular_file_is_refused_naming_it(
    tmp_path: Path, target: str, problem: str
) -> None:
    ctx = make_tree(tmp_path / "ctx", {"model_def.py": "", "pkg/x.py": ""})
    os.symlink(target, ctx / "escape")
    with pytest.raises(ContextError) as info:
        read_context(str(ctx))
    message = str(info.value)
    assert f"symbolic link escape -> {target} points outside it" in message
    assert f"to {problem}; remove it or list it in {DETIGNORE}" in message and "\n" not in message


@pytest.mark.parametrize("target", ["../outside.py", "../../outside.py"])
def test_a_link_out_of_the_context_to_a_file_brings_its_content(tmp_path: Path, target: str) -> None:
    # Determined's CLI uploads a linked file's content; its e2e mnist_pytorch fixture is made of
    # such links (train.py -> ../../../../examples/tutorials/mnist_pytorch/train.py).
    (tmp_path / "outside.py").write_text("shared = 1\n")
    ctx = make_tree(tmp_path / "ctx", {"model_def.py": "", "pkg/x.py": ""})
    where = ctx if target.count("..") == 1 else ctx / "pkg"
    os.symlink(target, where / "linked.py")
    rel = os.path.relpath(where / "linked.py", ctx)
    found = read_context(str(ctx))
    assert found.copied_links == {rel: str((tmp_path / "outside.py").resolve())}
    assert found.files[rel] == len("shared = 1\n") and rel not in found.links
    snapshot_context(found, str(tmp_path / "snap"))
    copied = tmp_path / "snap" / rel
    assert not copied.is_symlink() and copied.read_text() == "shared = 1\n"


def test_an_ignored_link_out_of_the_context_is_no_error(tmp_path: Path) -> None:
    ctx = make_tree(tmp_path / "ctx", {"model_def.py": "", DETIGNORE: "data/\n"})
    os.symlink("/etc", ctx / "data")  # `data/` matches a link to a directory
    os.symlink("/etc", ctx / ".hidden")
    found = read_context(str(ctx))
    assert found.links == {} and sorted(found.files) == ["model_def.py"]


# --- size limit -----------------------------------------------------------------------------


def test_size_limit_names_the_biggest_files(tmp_path: Path) -> None:
    ctx = make_tree(tmp_path / "ctx", {"model_def.py": "x"})
    for name, size in [("big.bin", 3000), ("data/mid.bin", 2000), ("small.bin", 1000), ("tiny", 10)]:
        path = ctx / name
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(b"\0" * size)
    assert read_context(str(ctx), limit=6011).total_bytes == 6011
    with pytest.raises(ContextError) as info:
        read_context(str(ctx), limit=6010)
    message = str(info.value)
    assert "biggest: big.bin (0.0 MiB), data/mid.bin (0.0 MiB), small.bin (0.0 MiB);" in message
    assert "tiny" not in message and str(ctx / DETIGNORE) in message
    (ctx / DETIGNORE).write_text("*.bin\n")  # ignored files do not count
    assert read_context(str(ctx), limit=100).total_bytes == 11


# --- snapshot and copies --------------------------------------------------------------------


def test_checkpoint_copies_hard_link_the_snapshot(tmp_path: Path) -> None:
    ctx = make_tree(tmp_path / "ctx", {"model_def.py": "A", "pkg/util.py": "U", "pkg/empty/.keep": ""})
    (ctx / "data.bin").write_bytes(os.urandom(1 << 20))
    os.symlink("model_def.py", ctx / "alias.py")
    snap = tmp_path / "snap"
    snapshot_context(read_context(str(ctx)), str(snap), source=str(ctx))
    manifest = json.loads((snap / SNAPSHOT_MANIFEST).read_text())
    assert manifest["source"] == str(ctx) and manifest["bytes"] == (1 << 20) + 2
    assert manifest["files"] == ["data.bin", "model_def.py", "pkg/util.py"]
    assert not os.stat(snap / "model_def.py").st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)

    (snap / "written_by_the_trial.txt").write_text("not part of the snapshot")
    copies = [tmp_path / "ck1" / "code", tmp_path / "ck2" / "code"]
    for dest in copies:
        copy_context(str(snap), str(dest))
        assert all_files(dest) == [SNAPSHOT_MANIFEST, "data.bin", "model_def.py", "pkg/util.py"]
        assert os.readlink(dest / "alias.py") == "model_def.py"
        assert (dest / "pkg" / "empty").is_dir()
        assert os.stat(dest / "data.bin").st_ino == os.stat(snap / "data.bin").st_ino
    assert os.stat(snap / "data.bin").st_nlink == 3
    # The data file is on disk once for the snapshot and both checkpoints.
    assert disk_usage([str(snap)] + [str(c) for c in copies]) < 1.2 * (1 << 20)


def test_copies_fall_back_to_bytes_when_links_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ctx = make_tree(tmp_path / "ctx", {"model_def.py": "A"})
    snap = tmp_path / "snap"
    snapshot_context(read_context(str(ctx)), str(snap))

    def cross_device(src: str, dst: str) -> None:
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(os, "link", cross_device)
    copy_context(str(snap), str(tmp_path / "code"))
    assert (tmp_path / "code" / "model_def.py").read_text() == "A"
    assert os.stat(tmp_path / "code" / "model_def.py").st_nlink == 1


def test_plain_directories_and_files_are_copied_with_the_same_rules(tmp_path: Path) -> None:
    ctx = make_tree(tmp_path / "ctx", {"model_def.py": "A", ".secret": "s", "__pycache__/m.pyc": ""})
    copy_context(str(ctx), str(tmp_path / "code"))
    assert all_files(tmp_path / "code") == ["model_def.py"]
    assert os.stat(tmp_path / "code" / "model_def.py").st_nlink == 1  # a copy, not a link
    copy_context(str(ctx / "model_def.py"), str(tmp_path / "single"))
    assert all_files(tmp_path / "single") == ["model_def.py"]
    os.symlink("/etc", ctx / "etc")
    with pytest.raises(ContextError, match="symbolic link etc -> /etc"):
        copy_context(str(ctx), str(tmp_path / "refused"))
