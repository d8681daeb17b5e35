"""A safe YAML loader that remembers how numbers were written.

``python: 3.10`` is the float 3.1 to YAML. Version keys need the text the user typed,
so every plain number this loader builds carries it in ``.source``. Duplicate keys in a
mapping are an error instead of a silent last-one-wins.
"""

from __future__ import annotations

from typing import Any

import yaml


class SourceFloat(float):
    source: str


class SourceInt(int):
    source: str


class DuplicateKey(yaml.YAMLError):
    def __init__(self, key: str, line: int) -> None:
        super().__init__(f"key {key!r} appears twice (second at line {line})")
        self.key = key
        self.line = line


class _Loader(yaml.SafeLoader):
    pass


def _float(loader: _Loader, node: yaml.ScalarNode) -> float:
    value = SourceFloat(loader.construct_yaml_float(node))
    value.source = node.value
    return value


def _int(loader: _Loader, node: yaml.ScalarNode) -> int:
    value = SourceInt(loader.construct_yaml_int(node))
    value.source = node.value
    return value


def _mapping(loader: _Loader, node: yaml.MappingNode) -> dict[Any, Any]:
    loader.flatten_mapping(node)
    result: dict[Any, Any] = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if key in result:
            raise DuplicateKey(str(key), key_node.start_mark.line + 1)
        result[key] = loader.construct_object(value_node, deep=True)
    return result


_Loader.add_constructor("tag:yaml.org,2002:float", _float)
_Loader.add_constructor("tag:yaml.org,2002:int", _int)
_Loader.add_constructor("tag:yaml.org,2002:map", _mapping)


def load(text: str) -> Any:
    """Parse one YAML document with source-preserving numbers."""
    return yaml.load(text, Loader=_Loader)  # a SafeLoader subclass: safe


def source_text(value: object) -> str | None:
    """The text a number was written as, when this loader made it."""
    if isinstance(value, (SourceFloat, SourceInt)):
        return value.source
    return None
