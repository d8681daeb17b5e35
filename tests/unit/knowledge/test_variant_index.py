"""Wheel variants read where a (local) index serves them, recorded in the lock and the
certificate.

The index is a folder served over HTTP (PEP 503 pages) or a handler answering PEP 691
JSON, with variant wheels made by hand to PEP 825 (https://peps.python.org/pep-0825/):
``{name}-{version}-{tags}-{label}.whl`` with ``*.dist-info/variant.json``, and
``{name}-{version}-variants.json`` linked from the project page ("Index-level metadata").
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from envforge import lock
from envforge.cli import main
from envforge.core.net import Policy
from envforge.errors import InvalidInput
from envforge.knowledge.index import IndexClient
from envforge.knowledge.variant_index import (
    ServedVariants,
    choose_served,
    served_variants,
    variant_for,
    variants_json_name,
)
from envforge.knowledge.wheel_variants import WheelVariant, lock_variants, supported_for
from envforge.lock_variants import locked_variant, with_locked_variant, with_served_variant
from envforge.publish.certificate import Certificate, issue
from envforge.recipe.catalogue import Catalogue
from envforge.recipe.model import Recipe
from envforge.stack import stack_of
from tests.helpers.httpserver import Handler, Served, serving, serving_folder
from tests.helpers.wheels import pure_wheel, variant_wheel

VERSION = "2.14.1"
SCHEMA = "https://variants-schema.wheelnext.dev/v0.0.3.json"
#: labels and properties in the shape of torch's variants on WheelNext's demo index
#: (cuda_version_lower_bound + the sm_arch list of the wheels' SASS)
METADATA: dict[str, Any] = {
    "$schema": SCHEMA,
    "default-priorities": {"namespace": ["nvidia"]},
    "variants": {
        "cu126": {
            "nvidia": {
                "cuda_version_lower_bound": ["12.6"],
                "sm_arch": [
                    "50_real",
                    "60_real",
                    "70_real",
                    "75_real",
                    "80_real",
                    "86_real",
                    "90_real",
                ],
            }
        },
        "cu130": {
            "nvidia": {
                "cuda_version_lower_bound": ["13.0"],
                "sm_arch": ["75_real", "80_real", "86_real", "90_real", "100_real", "120_real"],
            }
        },
    },
}


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def make_index(
    root: Path,
    metadata: dict[str, Any] = METADATA,
    *,
    labels: tuple[str, ...] = ("cu126", "cu130"),
    with_json: bool = True,
) -> dict[str, str]:
    """``root/simple/torch/index.html`` linking variant wheels (with ``#sha256=``), a
    plain wheel and, with ``with_json``, ``torch-2.14.1-variants.json``; the label → sha256
    of each variant wheel."""
    files = root / "files"
    files.mkdir(parents=True)
    page = root / "simple" / "torch"
    page.mkdir(parents=True)
    shas: dict[str, str] = {}
    links = []
    for label in labels:
        wheel = variant_wheel(files, "torch", VERSION, label, metadata)
        shas[label] = _sha(wheel)
        links.append(f'<a href="../../files/{wheel.name}#sha256={shas[label]}">{wheel.name}</a>')
    plain = pure_wheel(files, "torch", VERSION, "plain")
    links.append(f'<a href="../../files/{plain.name}#sha256={_sha(plain)}">{plain.name}</a>')
    if with_json:
        doc = files / variants_json_name("torch", VERSION)
        doc.write_text(json.dumps(metadata))
        links.append(f'<a href="../../files/{doc.name}#sha256={_sha(doc)}">{doc.name}</a>')
    (page / "index.html").write_text("<html><body>\n" + "\n".join(links) + "\n</body></html>\n")
    return shas


def client_for(served: Served) -> IndexClient:
    return IndexClient(policy=Policy.for_urls([served.url], {}), max_age=0.0)


# --------------------------------------------------------------------------- the index


def test_the_variants_an_index_serves_are_read_with_their_wheels(tmp_path: Path) -> None:
    shas = make_index(tmp_path)
    with serving_folder(tmp_path) as served:
        found = served_variants(client_for(served), f"{served.url}/simple", "torch", VERSION)
        assert isinstance(found, ServedVariants), found
        assert sorted(found.wheels) == ["cu126", "cu130"]  # the plain wheel has no label
        assert found.hashes("cu130") == (f"sha256:{shas['cu130']}",)
        assert found.url == f"{served.url}/files/torch-2.14.1-variants.json"
        assert "/simple/torch/" in served.requests[0]


@pytest.mark.parametrize(
    ("arch", "cuda", "label"),
    [("sm_90", "13.0", "cu130"), ("sm_90", "12.8", "cu126"), ("sm_61", "13.0", "cu126")],
)
def test_the_label_chosen_from_the_index_for_a_target(
    tmp_path: Path, arch: str, cuda: str, label: str
) -> None:
    shas = make_index(tmp_path)
    with serving_folder(tmp_path) as served:
        chosen = variant_for(
            client_for(served), f"{served.url}/simple", "torch", VERSION, supported_for(arch, cuda)
        )
    assert chosen is not None
    assert chosen.label == label
    assert chosen.hashes == (f"sha256:{shas[label]}",)
    assert f"nvidia :: sm_arch :: {arch[3:]}_real" in chosen.properties or arch == "sm_61"


def test_the_index_file_name_is_normalised_as_wheel_names_are() -> None:
    assert variants_json_name("Triton-ROCm", "3.6.0") == "triton_rocm-3.6.0-variants.json"
    assert variants_json_name("torch", VERSION) == "torch-2.14.1-variants.json"


def test_an_index_without_variants_json_serves_no_variants(tmp_path: Path) -> None:
    make_index(tmp_path, with_json=False)
    with serving_folder(tmp_path) as served:
        found = variant_for(
            client_for(served),
            f"{served.url}/simple",
            "torch",
            VERSION,
            supported_for("sm_90", "13.0"),
        )
    assert found is None


def test_no_fitting_variant_is_refused_naming_each_label(tmp_path: Path) -> None:
    make_index(tmp_path)
    with serving_folder(tmp_path) as served, pytest.raises(InvalidInput) as info:
        variant_for(
            client_for(served),
            f"{served.url}/simple",
            "torch",
            VERSION,
            supported_for("sm_120", "12.8"),
        )
    text = str(info.value)
    assert "no variant of torch 2.14.1 fits sm_120, CUDA 12.8" in text
    assert "cu126: nvidia :: sm_arch" in text
    assert "cu130: nvidia :: cuda_version_lower_bound :: 13.0" in text


def test_a_label_without_a_wheel_is_not_chosen(tmp_path: Path) -> None:
    make_index(tmp_path, labels=("cu126",))  # variants.json lists cu130 too
    with serving_folder(tmp_path) as served:
        found = served_variants(client_for(served), f"{served.url}/simple", "torch", VERSION)
        assert isinstance(found, ServedVariants), found
        choice = choose_served(found, supported_for("sm_90", "13.0"))
    assert choice.label == "cu126"
    assert choice.refused["cu130"] == "listed in variants.json but no wheel is served"


def test_a_pep_691_json_page_is_read_too(tmp_path: Path) -> None:
    files = tmp_path / "files"
    files.mkdir()
    wheel = variant_wheel(files, "torch", VERSION, "cu130", METADATA)
    doc_body = json.dumps(METADATA).encode()
    page = {
        "meta": {"api-version": "1.1"},
        "name": "torch",
        "files": [
            {
                "filename": wheel.name,
                "url": f"/files/{wheel.name}",
                "hashes": {"sha256": _sha(wheel)},
            },
            {"filename": "torch-2.14.1-variants.json", "url": "/files/v.json", "hashes": {}},
        ],
    }

    class Json(Handler):
        def do_GET(self) -> None:
            if self.path.startswith("/simple/torch/"):
                self.send(
                    200,
                    json.dumps(page).encode(),
                    {"Content-Type": "application/vnd.pypi.simple.v1+json"},
                )
            elif self.path == "/files/v.json":
                self.send(200, doc_body, {"Content-Type": "application/json"})
            else:
                self.send(404)

    with serving(Json) as served:
        chosen = variant_for(
            client_for(served),
            f"{served.url}/simple",
            "torch",
            VERSION,
            supported_for("sm_90", "13.0"),
        )
    assert chosen is not None
    assert chosen.label == "cu130"
    assert chosen.hashes == (f"sha256:{_sha(wheel)}",)


def test_metadata_off_the_format_on_the_index_is_an_error(tmp_path: Path) -> None:
    broken = {**METADATA, "default-priorities": {"namespace": []}}
    make_index(tmp_path, broken)
    with (
        serving_folder(tmp_path) as served,
        pytest.raises(InvalidInput, match="namespace nvidia is not in"),
    ):
        variant_for(
            client_for(served),
            f"{served.url}/simple",
            "torch",
            VERSION,
            supported_for("sm_90", "13.0"),
        )


# --------------------------------------------------------------------------- lock


def _recipe(tmp_path: Path, index: str) -> Recipe:
    """The shipped sm_90 recipe with its torch index pointed at the local index, in a
    folder of its own (its lock goes next to it)."""
    base = Catalogue.default().load("sm_90", ())
    folder = tmp_path / "recipes"
    folder.mkdir(exist_ok=True)
    return replace(base, torch=replace(base.torch, index=index), origin=str(folder / "sm_90.yaml"))


def test_the_lock_records_the_chosen_label_and_the_certificate_the_one_installed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shas = make_index(tmp_path / "index")
    with serving_folder(tmp_path / "index") as served:
        recipe = _recipe(tmp_path, f"{served.url}/simple")
        stack = with_served_variant(recipe, stack_of(recipe), client=client_for(served))
    assert stack.variant is not None
    assert stack.variant.label == "cu130"  # sm_90 with the recipe's CUDA 13.0
    # the lock installs the cu130 wheel: its torch line carries that wheel's hash
    body = f"torch=={VERSION} \\\n    --hash=sha256:{shas['cu130']}\n"
    monkeypatch.setattr(lock, "_compile", lambda *a, **k: body)
    target = tmp_path / "recipes" / "sm_90.lock.txt"
    lock.write_lock(recipe, stack=stack, output=target)
    text = target.read_text()
    assert lock_variants(text) == (stack.variant,)
    lock.check_lock(target)  # a comment line: the lock stays valid
    monkeypatch.setattr(lock, "default_lock_file", lambda _r: target)
    plain = stack_of(recipe)
    assert plain.variant is None
    certified = with_locked_variant(recipe, plain)
    assert certified.variant == stack.variant
    cert = issue(
        report={"status": "pass"},
        recipe_name="sm_90",
        recipe_hash="h",
        stack_tag="t",
        stack=certified.to_dict(),
    )
    again = Certificate.from_json(cert.to_json())
    assert again.variant == stack.variant
    assert again.data["stack"]["variant"]["label"] == "cu130"


def test_a_lock_that_pins_the_plain_wheel_certifies_no_variant(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_index(tmp_path / "index")
    with serving_folder(tmp_path / "index") as served:
        recipe = _recipe(tmp_path, f"{served.url}/simple")
        stack = with_served_variant(recipe, stack_of(recipe), client=client_for(served))
    monkeypatch.setattr(
        lock, "_compile", lambda *a, **k: f"torch=={VERSION} \\\n    --hash=sha256:{'0' * 64}\n"
    )
    target = tmp_path / "recipes" / "sm_90.lock.txt"
    lock.write_lock(recipe, stack=stack, output=target)
    monkeypatch.setattr(lock, "default_lock_file", lambda _r: target)
    assert lock_variants(target.read_text())[0].label == "cu130"  # what the index offers
    assert with_locked_variant(recipe, stack_of(recipe)).variant is None  # not installed


def test_stacks_locks_and_certificates_without_variants_are_as_they_were() -> None:
    recipe = Catalogue.default().load("sm_90", ())
    stack = stack_of(recipe)
    assert "variant" not in stack.to_dict()
    cert = issue(
        report={"status": "pass"},
        recipe_name="sm_90",
        recipe_hash="h",
        stack_tag="t",
        stack=stack.to_dict(),
    )
    assert cert.variant is None
    assert Certificate.from_json(cert.to_json()).variant is None
    # and an older certificate (no stack at all) reads as before
    older = issue(report={"status": "pass"}, recipe_name="sm_90", recipe_hash="h", stack_tag="t")
    assert older.variant is None


def test_a_lock_the_build_would_refuse_records_no_variant(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    recipe = _recipe(tmp_path, "http://127.0.0.1:9/simple")
    target = tmp_path / "recipes" / "sm_90.lock.txt"
    target.write_text(
        f"# envforge-lock: recipe=sm_90 inputs={lock.inputs_digest(recipe)}\n"
        "--extra-index-url http://elsewhere/simple\n"
    )
    monkeypatch.setattr(lock, "default_lock_file", lambda _r: target)
    with pytest.raises(InvalidInput):
        lock.lock_path(recipe)
    assert with_locked_variant(recipe, stack_of(recipe)).variant is None


def test_a_locked_variant_needs_the_package_version_and_a_hash_of_its_wheels() -> None:
    chosen = WheelVariant("torch", VERSION, "cu130", (), "", ("sha256:" + "a" * 64,))
    text = chosen.lock_line()
    assert locked_variant(text, ("--hash=sha256:" + "a" * 64,), VERSION) == chosen
    assert locked_variant(text, ("--hash=sha256:" + "b" * 64,), VERSION) is None
    assert locked_variant(text, ("--hash=sha256:" + "a" * 64,), "2.14.0") is None


# --------------------------------------------------------------------------- command line


def test_lock_variants_says_which_label_and_refuses_without_an_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    shas = make_index(tmp_path / "index")
    monkeypatch.setenv("ENVFORGE_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(
        lock,
        "_compile",
        lambda *a, **k: f"torch=={VERSION} \\\n    --hash=sha256:{shas['cu130']}\n",
    )
    with serving_folder(tmp_path / "index") as served:
        monkeypatch.setenv("ENVFORGE_ALLOW_HOSTS", f"{served.url}")
        out = tmp_path / "out.lock.txt"
        code = main(
            [
                "lock",
                "sm_90",
                "--variants",
                "--set",
                f"torch.index={served.url}/simple",
                "-o",
                str(out),
            ]
        )
    said = capsys.readouterr()
    assert code == 0, said.err
    assert "wheel variant: torch 2.14.1 label cu130" in said.out
    assert lock_variants(out.read_text())[0].label == "cu130"
    assert main(["lock", "cpu", "--variants", "-o", str(tmp_path / "cpu.lock.txt")]) == 2
    assert "recipe cpu names no GPU arch to choose a wheel variant for" in capsys.readouterr().err
