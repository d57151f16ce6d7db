"""Reading the YAML files a user writes (run configs, `healtrl select` configs, a run's `config.yaml`) with duplicate
keys refused.

`yaml.safe_load` keeps the last of two equal keys of a mapping without a word (PyYAML does not enforce YAML's "keys
are unique"): a config that sets `learning_rate` twice trains with the second value, whichever the user meant.
`load_yaml` reads like `yaml.safe_load` but raises `DuplicateKeyError` naming the key, its path for nested mappings
(`best_checkpoint.k`) and both lines. Merge keys (`<<: *defaults`) are not duplicates: YAML defines that the mapping's
own keys override the merged ones.
"""

from __future__ import annotations

from typing import IO, Any

import yaml

__all__ = ["DuplicateKeyError", "load_yaml"]

_MERGE_TAG = "tag:yaml.org,2002:merge"


class DuplicateKeyError(yaml.YAMLError):
    """A mapping of a YAML document sets the same key twice; the message names the key, its path and both lines."""

    def __init__(self, path: str, first_line: int, second_line: int):
        self.path, self.first_line, self.second_line = path, first_line, second_line
        lines = f"lines {first_line} and {second_line}" if first_line != second_line else f"twice on line {first_line}"
        super().__init__(
            f"duplicate key `{path}` ({lines}): YAML would keep the second value and silently drop the first. Remove "
            "one of the two."
        )


def _key_text(node: yaml.Node) -> str:
    return str(node.value) if isinstance(node, yaml.ScalarNode) else f"<{node.id} key>"


def _check_unique(node: yaml.Node, path: str, seen: set[int]) -> None:
    """Walk a composed document and raise `DuplicateKeyError` at the first mapping that repeats a key."""
    if id(node) in seen:  # an alias of a node already walked (anchors may also be recursive)
        return
    seen.add(id(node))
    if isinstance(node, yaml.MappingNode):
        keys: dict[tuple, int] = {}
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                continue
            text = _key_text(key_node)
            where = f"{path}.{text}" if path else text
            if isinstance(key_node, yaml.ScalarNode):
                identity = (key_node.tag, key_node.value)
                line = key_node.start_mark.line + 1
                if identity in keys:
                    raise DuplicateKeyError(where, keys[identity], line)
                keys[identity] = line
            _check_unique(value_node, where, seen)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _check_unique(item, f"{path}[{index}]", seen)


def load_yaml(stream: str | IO) -> Any:
    """`yaml.safe_load(stream)`, raising `DuplicateKeyError` (a `yaml.YAMLError`) for a key set twice in a mapping,
    at any nesting level."""
    loader = yaml.SafeLoader(stream)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_unique(node, "", set())
        return loader.construct_document(node)
    finally:
        loader.dispose()
