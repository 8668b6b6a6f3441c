"""Determined config fields that det-lite accepts but does not use locally.

A config written for a Determined cluster should run unchanged: cluster-only fields (container
image, pod spec, resource pool, priority, bind mounts, profiling.sync_timings, workspace/project,
log policies, ...) are removed before validation and reported as dotted paths, so the CLI can print
one warning line. Fields Determined does not know either stay in and fail validation.

``checkpoint_storage``'s types are all det-lite's (``storage/_backend.py``); only its
``checkpoint_path``, ``propagation`` and ``tensorboard_path`` are cluster-only.
"""

from __future__ import annotations

import copy
from typing import Any, Dict, FrozenSet, List, Mapping, Sequence, Tuple

from determined_lite.config._errors import format_path

_UNUSED: Dict[Tuple[str, ...], FrozenSet[str]] = {
    (): frozenset(
        {
            "bind_mounts",
            "data_layer",
            "debug",
            "integrations",
            "internal",
            "labels",
            "log_policies",
            "pbs",
            "preemption_timeout",
            "project",
            "retention_policy",
            "security",
            "slurm",
            "tensorboard_storage",
            "workspace",
        }
    ),
    ("environment",): frozenset(
        {
            "add_capabilities",
            "drop_capabilities",
            "force_pull_image",
            "image",
            "pod_spec",
            "ports",
            "proxy_ports",
            "registry_auth",
        }
    ),
    ("resources",): frozenset(
        {
            "agent_label",
            "devices",
            "is_single_node",
            "max_slots",
            "native_parallel",
            "priority",
            "resource_pool",
            "shm_size",
            "slots",
            "weight",
        }
    ),
    ("optimizations",): frozenset(
        {
            "auto_tune_tensor_fusion",
            "grad_updates_size_file",
            "gradient_compression",
            "mixed_precision",
            "tensor_fusion_cycle_time",
            "tensor_fusion_threshold",
        }
    ),
    ("searcher",): frozenset({"bracket_rungs"}),
    ("profiling",): frozenset({"sync_timings"}),
    ("checkpoint_storage",): frozenset(
        {"checkpoint_path", "propagation", "tensorboard_path"}
    ),
}

# Determined's searchers that det-lite does not run (named in the error a config using one gets).
DETERMINED_ONLY_SEARCHERS = ("pbt", "custom", "async_halving", "adaptive", "adaptive_simple", "sync_halving")

def split_unused(raw: Mapping[str, Any]) -> Tuple[Dict[str, Any], List[str]]:
    """A copy of ``raw`` without the Determined-only fields, and their dotted paths (file order)."""
    clean = copy.deepcopy(dict(raw))
    unused: List[str] = []
    for section, keys in _UNUSED.items():
        node = _section(clean, section)
        if node is None:
            continue
        for key in [k for k in node if k in keys]:
            if node[key] is not None:
                unused.append(format_path(section + (key,)))
            del node[key]
    return clean, unused


def _section(root: Dict[str, Any], path: Sequence[str]) -> Any:
    node: Any = root
    for key in path:
        if not isinstance(node, dict):
            return None
        node = node.get(key)
    return node if isinstance(node, dict) else None


def unused_fields_warning(unused: Sequence[str], source: str = "<config>") -> str:
    """The one warning line the CLI prints for accepted-but-unused Determined fields ("" if none)."""
    if not unused:
        return ""
    line = f"{source}: ignoring Determined fields that det-lite does not use locally: {', '.join(unused)}"
    return line


def determined_only_fields(section: Sequence[str]) -> List[str]:
    """The Determined-only field names of a section (``()`` is the top level), for typo hints."""
    return sorted(_UNUSED.get(tuple(section), frozenset()))
