"""The only code that writes files: atomic replace, whole-line JSONL appends, path confinement (docs/reference/architecture.md).

The package's modules: ``walk`` (confinement: the no-follow walk from a workspace root, recorded paths checked,
the errors), ``read`` (regular files only, within a size; listings) and ``write`` (atomic replace, appends,
removals, directories). Only this package creates, renames or deletes files (tests/test_fsio_only.py).
"""

from __future__ import annotations

from memoryd.fsio.read import (
    list_dir,
    read_range,
    read_regular,
)
from memoryd.fsio.walk import (
    NAME_MAX,
    PATH_MAX,
    WORKSPACE_TREES,
    ChangedMeanwhile,
    FileTooLarge,
    NotRegularFile,
    SymlinkRefused,
    confine,
    fsync_dir,
    member,
    within,
)
from memoryd.fsio.write import (
    TMP_SUFFIX,
    append_block,
    append_line,
    atomic_write,
    flush,
    link_copy,
    make_dirs,
    make_private_dir,
    open_lock_file,
    remove,
    remove_stale_temps,
    remove_tree,
    rename,
    replace,
)

__all__ = [
    "NAME_MAX",
    "PATH_MAX",
    "TMP_SUFFIX",
    "WORKSPACE_TREES",
    "ChangedMeanwhile",
    "FileTooLarge",
    "NotRegularFile",
    "SymlinkRefused",
    "append_block",
    "append_line",
    "atomic_write",
    "confine",
    "flush",
    "fsync_dir",
    "link_copy",
    "list_dir",
    "make_dirs",
    "make_private_dir",
    "member",
    "open_lock_file",
    "read_range",
    "read_regular",
    "remove",
    "remove_stale_temps",
    "remove_tree",
    "rename",
    "replace",
    "within",
]
