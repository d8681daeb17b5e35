"""``click.Choice`` over a registry's keys, read when the value is checked or help is
shown: a name registered later (a plugin, a test) is offered with no CLI edit, and the
registry's modules load only then (``envforge --help`` loads none)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import click


class RegistryChoice(click.Choice[str]):
    """One of the keys of ``registry()`` (imported when first needed)."""

    def __init__(self, registry: Callable[[], Mapping[str, object]]) -> None:
        super().__init__(())
        self._registry = registry

    def _refresh(self) -> None:
        self.choices = tuple(self._registry())

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        self._refresh()
        return super().convert(value, param, ctx)

    def get_metavar(self, param: click.Parameter, ctx: click.Context) -> str | None:
        self._refresh()
        return super().get_metavar(param, ctx)

    def get_missing_message(self, param: click.Parameter, ctx: click.Context | None) -> str:
        self._refresh()
        return super().get_missing_message(param, ctx)

    def shell_complete(
        self, ctx: click.Context, param: click.Parameter, incomplete: str
    ) -> list[click.shell_completion.CompletionItem]:
        self._refresh()
        return super().shell_complete(ctx, param, incomplete)


def render_formats() -> Mapping[str, object]:
    from envforge.render.formats import FORMATS  # noqa: PLC0415 - when a format is named

    return FORMATS
