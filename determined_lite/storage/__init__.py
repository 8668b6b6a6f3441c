"""Files on disk that outlive a process, read and written without torch.

* ``_context.py``: the context directory (``.detignore``, links, size limit), its snapshot made
  once at ``experiment create``, and its copies (hard links to the snapshot).
* ``_backend.py``: checkpoint storage (``checkpoint_storage``'s five types) over fsspec: upload,
  download, delete, probe, listing; secrets kept out of the store.
* ``_confine.py``: nothing read from storage lands outside its destination (stored names and
  links checked before anything is written); ``StorageError``.
* ``_code.py``: a checkpoint's ``code/`` (one link to the snapshot's code, put on disk once) and
  stand-alone copies of checkpoints.
* ``_layout.py``: a checkpoint root (``<uuid>/``, ``.tmp-<uuid>/``, storage ids, ``metadata.json``'s
  writer and store), disk usage counting hard links once, flushing to disk, deleting in the
  background (``move_aside``, ``remove_in_background``).
"""

from determined_lite.storage._backend import (
    CLOUD_TYPES,
    REDACTED,
    SECRET_FIELDS,
    CheckpointStorage,
    checkpoint_storage,
    fetch_checkpoint,
    load_secrets,
    redact,
    save_secrets,
)
from determined_lite.storage._code import SEALED_CODE, checkpoint_code, code_reference, copy_checkpoint
from determined_lite.storage._confine import StorageError, UnsafeNameError
from determined_lite.storage._context import (
    DEFAULT_IGNORE,
    DETIGNORE,
    MAX_CONTEXT_BYTES,
    SNAPSHOT_MANIFEST,
    ContextError,
    ContextFiles,
    copy_context,
    read_context,
    read_snapshot,
    snapshot_context,
)
from determined_lite.storage._layout import (
    CODE_DIR,
    DELETED_PREFIX,
    METADATA_FILE,
    STATE_FILE,
    STORE_KEY,
    TMP_GRACE_S,
    TMP_PREFIX,
    WRITER_KEY,
    CheckpointIdError,
    RootEntry,
    checkpoint_dir,
    disk_usage,
    is_checkpoint_id,
    make_durable,
    move_aside,
    publish_dir,
    read_metadata_file,
    remove_in_background,
    root_entries,
    writer_may_be_alive,
    writer_record,
)

__all__ = [
    "CLOUD_TYPES",
    "REDACTED",
    "SECRET_FIELDS",
    "CheckpointStorage",
    "StorageError",
    "UnsafeNameError",
    "checkpoint_storage",
    "fetch_checkpoint",
    "redact",
    "load_secrets",
    "save_secrets",
    "CODE_DIR",
    "DELETED_PREFIX",
    "DEFAULT_IGNORE",
    "DETIGNORE",
    "MAX_CONTEXT_BYTES",
    "METADATA_FILE",
    "SEALED_CODE",
    "SNAPSHOT_MANIFEST",
    "STATE_FILE",
    "STORE_KEY",
    "TMP_GRACE_S",
    "TMP_PREFIX",
    "WRITER_KEY",
    "CheckpointIdError",
    "ContextError",
    "ContextFiles",
    "RootEntry",
    "checkpoint_code",
    "checkpoint_dir",
    "code_reference",
    "copy_checkpoint",
    "copy_context",
    "disk_usage",
    "is_checkpoint_id",
    "make_durable",
    "move_aside",
    "publish_dir",
    "read_context",
    "read_metadata_file",
    "read_snapshot",
    "remove_in_background",
    "root_entries",
    "snapshot_context",
    "writer_may_be_alive",
    "writer_record",
]
