"""YAML read with libyaml's C parser where PyYAML was built with it (pure Python otherwise).

The launcher reads three YAML files on every run (the cluster table, the trainer
config, the model sizes); PyYAML's pure-Python SafeLoader spent 37 ms of a 0.2 s
dry run on them, its C loader a few. Same safe subset either way. ``load_plain`` is the
stricter reading of a file a person writes for one launch (a sweep): a key given twice or an
alias (``*name``) is refused, not read as the last key winning or a copy of another value.
"""

from __future__ import annotations

from typing import Any, Iterator

import yaml

SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load(text: str) -> Any:
    """``yaml.safe_load``, faster: plain data only (no Python objects), errors as yaml.YAMLError."""
    return yaml.load(text, Loader=SafeLoader)  # noqa: S506 - a safe loader


def load_plain(text: str) -> Any:
    """``load``, refusing (yaml.YAMLError) a mapping key given twice and any alias."""
    loader = SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        seen: set[int] = set()
        for each in _nodes(node):
            if id(each) in seen:
                raise yaml.YAMLError(f"an alias (*name) at {_where(each)}: write the value out (aliases are refused)")
            seen.add(id(each))
            if isinstance(each, yaml.MappingNode):
                _refuse_repeated_keys(loader, each)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _nodes(node: yaml.Node) -> Iterator[yaml.Node]:
    """Every node under ``node``, once for each place it appears (an alias's node appears twice)."""
    yield node
    if isinstance(node, yaml.SequenceNode):
        for item in node.value:
            yield from _nodes(item)
    elif isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            yield from _nodes(key)
            yield from _nodes(value)


def _refuse_repeated_keys(loader: Any, node: yaml.MappingNode) -> None:
    """Keys compared as YAML reads them (``1`` and ``0x1``, ``a`` and ``"a"`` are one key)."""
    keys: list[Any] = []
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            raise yaml.YAMLError(f"a merge key (<<) at {_where(key_node)}: write the keys out")
        if not isinstance(key_node, yaml.ScalarNode):
            continue
        key = loader.construct_object(key_node)
        if key in keys:
            raise yaml.YAMLError(f"the key {str(key)[:64]!r} is given twice (again at {_where(key_node)})")
        keys.append(key)


def _where(node: yaml.Node) -> str:
    return f"line {node.start_mark.line + 1}, column {node.start_mark.column + 1}"
