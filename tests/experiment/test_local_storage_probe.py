"""``checkpoint_storage: {type: shared_fs | directory}`` is probed at ``create`` as the cloud
types are: a root that cannot be created or written is one line naming the field, exit 2, and
nothing recorded."""

from __future__ import annotations

import pytest

from tests.cli_helpers import cli
from tests.cloud_storage import LINEAR, linear_config

pytestmark = pytest.mark.timeout(240)


def test_an_unwritable_local_root_is_one_line_at_create(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    for storage, field in [
        ({"type": "shared_fs", "host_path": str(blocker), "storage_path": "ck"}, "host_path"),
        ({"type": "directory", "container_path": str(blocker)}, "container_path"),
    ]:
        path = linear_config(tmp_path, storage)
        proc = cli("experiment", "create", path, LINEAR)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
        assert lines[0].startswith(
            f"det-lite: error: {path}: checkpoint_storage.{field}: cannot write checkpoints in {blocker}"
        ), lines[0]
    assert cli("experiment", "list", "--json", check=True).stdout.strip() == "[]"
    assert blocker.read_text() == ""
