"""Find recipes by name (shipped catalogue plus ENVFORGE_RECIPE_PATH) or by path."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from envforge.core.resources import recipes_dir
from envforge.errors import InvalidInput

if TYPE_CHECKING:
    from envforge.recipe.model import Recipe

ENV_PATH = "ENVFORGE_RECIPE_PATH"


@dataclass(frozen=True)
class Catalogue:
    """Recipe folders in search order: user folders first, the shipped one last."""

    folders: tuple[Path, ...]

    @classmethod
    def default(cls, environ: Mapping[str, str] | None = None) -> Catalogue:
        env = os.environ if environ is None else environ
        extra = [Path(p).expanduser() for p in env.get(ENV_PATH, "").split(os.pathsep) if p]
        return cls(folders=(*extra, recipes_dir()))

    def files(self) -> dict[str, Path]:
        """Recipe name (file stem) → file; the first folder that has a name wins."""
        found: dict[str, Path] = {}
        for folder in self.folders:
            if not folder.is_dir():
                continue
            for path in sorted(folder.glob("*.y*ml")):
                if path.suffix in (".yaml", ".yml"):
                    found.setdefault(path.stem, path)
        return dict(sorted(found.items()))

    def resolve(self, ref: str) -> Path:
        """A recipe name or a path to a recipe file → the file."""
        looks_like_path = os.sep in ref or ref.endswith((".yaml", ".yml"))
        if looks_like_path:
            return Path(ref).expanduser()
        files = self.files()
        if ref in files:
            return files[ref]
        from envforge.core.yamlcheck import did_you_mean  # noqa: PLC0415 - keeps `list` light

        near = did_you_mean(ref, files)
        hint = f"did you mean {near!r}?" if near else "run `envforge list` to see the recipes"
        raise InvalidInput(f"no recipe named {ref!r}", hint=hint)

    def load(self, ref: str, overrides: Sequence[str] = ()) -> Recipe:
        return self._load_file(self.resolve(ref), overrides)

    def load_all(self, overrides: Sequence[str] = ()) -> list[Recipe]:
        return [self._load_file(p, overrides) for p in self.files().values()]

    def _load_file(self, path: Path, overrides: Sequence[str]) -> Recipe:
        """:func:`envforge.recipe.compiled.load_recipe` (imported when a recipe is loaded):
        a file in one of the folders is kept compiled, any other is read every time."""
        from envforge.recipe import compiled  # noqa: PLC0415 - keeps `list` light

        folder = os.path.abspath(path.parent)
        ours = any(folder == os.path.abspath(f) for f in self.folders)
        return compiled.load_recipe(path, overrides, compiled=ours)
