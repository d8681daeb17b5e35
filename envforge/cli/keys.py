"""``envforge keys generate -o DIR``: an ed25519 key pair for signing certificates."""

from __future__ import annotations

from pathlib import Path

import click

from envforge.cli.common import echo_json, json_option, note
from envforge.core.fsutil import os_error
from envforge.errors import InvalidInput, printable
from envforge.publish.signing import generate, load_trust


@click.group("keys")
def keys() -> None:
    """Signing keys for certificates (ed25519; formats: envforge.publish.signing)."""


@keys.command("generate")
@click.option(
    "-o",
    "--output",
    "out",
    required=True,
    metavar="DIR",
    type=click.Path(path_type=str),
    help="Folder for envforge.key (private, mode 0600) and envforge.pub (created if missing).",
)
@click.option(
    "--name", default="", metavar="NAME", help="A name for the key, kept in envforge.pub."
)
@json_option
def generate_cmd(out: str, name: str, as_json: bool) -> None:
    """Write DIR/envforge.key and DIR/envforge.pub; never overwrites existing keys (exit 2)."""
    if not out.strip():
        raise InvalidInput("-o is empty: name a folder for the keys", hint="-o keys")
    bad = next((ch for ch in name if not ch.isprintable() and ch not in " \t"), None)
    if bad is not None:
        raise InvalidInput(
            f"--name '{printable(name)}' contains the control character {printable(bad)}",
            hint="a name of printable characters",
        )
    try:
        key_path, pub_path = generate(Path(out), name)
    except OSError as exc:
        raise os_error(exc, verb="write", setting="-o") from None
    public = next(iter(load_trust([pub_path]).keys.values()))
    if as_json:
        echo_json(
            {"private": str(key_path), "public": str(pub_path), "fingerprint": public.fingerprint}
        )
        return
    note(f"private key {key_path} (mode 0600: keep it secret, never commit it)")
    click.echo(f"{pub_path} {public.fingerprint}")


@keys.command("pem")
@click.argument("pub", type=click.Path(path_type=Path), metavar="PUBFILE")
def pem_cmd(pub: Path) -> None:
    """Print each key of PUBFILE (envforge.pub lines) as a PEM public key (SubjectPublicKeyInfo,
    "BEGIN PUBLIC KEY"): the form cosign's --key and Kyverno's publicKeys read."""
    for key in load_trust([pub], setting=str(pub)).keys.values():
        click.echo(key.pem(), nl=False)
