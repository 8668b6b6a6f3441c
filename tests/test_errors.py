"""determined_lite._errors: what counts as a full disk, and finding an ActionRequired in a chain."""

from __future__ import annotations

import errno
import pickle
import shutil

from determined_lite._errors import ActionRequired, DiskFullError, find_action_required, is_disk_full
from determined_lite.pytorch import CallbackError
from determined_lite.store import StoreError, StoreFullError


def _raised_during(outer: BaseException, inner: BaseException) -> BaseException:
    try:
        try:
            raise inner
        except BaseException:
            raise outer  # noqa: B904 -- the implicit __context__ is what is tested
    except BaseException as e:
        return e


def test_disk_full_is_an_enospc_or_edquot_anywhere_in_the_chain() -> None:
    assert is_disk_full(OSError(errno.ENOSPC, "No space left on device"))
    assert is_disk_full(OSError(errno.EDQUOT, "Disk quota exceeded"))
    torch_style = _raised_during(RuntimeError("[enforce fail at inline_container.cc:672]"), OSError(28, "x"))
    assert is_disk_full(torch_style)
    assert not is_disk_full(OSError(errno.EIO, "Input/output error"))
    assert not is_disk_full(OSError("No space left on device"))  # no errno: not told
    assert not is_disk_full(RuntimeError("[enforce fail at inline_container.cc:672] file write failed"))


def test_copytree_errors_are_read_from_their_text() -> None:
    full = shutil.Error([("a.py", "b/a.py", "[Errno 28] No space left on device: 'b/a.py'")])
    other = shutil.Error([("a.py", "b/a.py", "[Errno 13] Permission denied: 'b/a.py'")])
    assert is_disk_full(full) and not is_disk_full(other)


def test_disk_full_error_is_one_line_and_pickles() -> None:
    error = DiskFullError("/ckpts", "the checkpoint at batch 4 could not be written")
    assert str(error) == "no space left on /ckpts: the checkpoint at batch 4 could not be written"
    assert str(DiskFullError("/ckpts")) == "no space left on /ckpts"
    assert isinstance(error, OSError) and error.errno == errno.ENOSPC and is_disk_full(error)
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is DiskFullError and str(copy) == str(error) and copy.path == "/ckpts"


def test_action_required_is_found_inside_a_callback_error() -> None:
    store_full = StoreFullError("no space left on /home: the det-lite store /home/det-lite.db ...")
    assert isinstance(store_full, StoreError) and isinstance(store_full, ActionRequired)
    try:
        try:
            raise store_full
        except StoreFullError as e:
            raise CallbackError("callback '_core.store' raised in on_checkpoint_upload_end") from e
    except CallbackError as wrapped:
        assert find_action_required(wrapped) is store_full
    assert find_action_required(RuntimeError("boom")) is None
